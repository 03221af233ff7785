package config

import (
	"os"
	"testing"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
)

// TestSpoolPath: store.spool as given; unset, spool-<replica.name>.db beside store.path (the
// name made safe for a file), or spool-<host>.db without a name (stable across restarts, so a
// restart finds what its last run spooled); TOLLWAY_STORE_SPOOL sets it.
func TestSpoolPath(t *testing.T) {
	configtest.ClearEnv(t)
	base := "store: {driver: postgres, dsn: \"postgres://u@db:5432/t\", path: /var/lib/tollway/tollway.db}\n"
	host, _ := os.Hostname()
	for _, c := range []struct{ yaml, want string }{
		{"", "/var/lib/tollway/spool-" + host + ".db"},
		{"replica: {name: replica-a}\n", "/var/lib/tollway/spool-replica-a.db"},
		{"replica: {name: \"pod/a b\"}\n", "/var/lib/tollway/spool-pod_a_b.db"},
	} {
		cfg, err := Load(configtest.Write(t, base+c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.SpoolPath(); got != c.want {
			t.Errorf("%q: spool %s, want %s", c.yaml, got, c.want)
		}
	}
	t.Setenv("TOLLWAY_STORE_SPOOL", "/spool/here.db")
	if cfg, err := Load(configtest.Write(t, base)); err != nil || cfg.SpoolPath() != "/spool/here.db" {
		t.Fatalf("TOLLWAY_STORE_SPOOL: %v %v", cfg, err)
	}
}
