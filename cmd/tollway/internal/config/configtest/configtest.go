// Package configtest helps tests write configuration files and keep the developer's TOLLWAY_*
// environment out of loading them.
package configtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ClearEnv keeps the developer's environment out of config.Load for the test.
func ClearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TOLLWAY_") {
			Unsetenv(t, k)
		}
	}
}

// Unsetenv unsets k for the test, restoring it afterwards.
func Unsetenv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "") // registers the restore
	os.Unsetenv(k)
}

// Write writes yaml to a tollway.yaml of the test's own and returns its path.
func Write(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tollway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
