package config

import (
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
)

// TestTasksConfig: tasks.max_age defaults to 6h and tasks.unknown_grace to 1m; a value that is
// not a duration within bounds is refused with a message naming the key, the value and a fix.
func TestTasksConfig(t *testing.T) {
	configtest.ClearEnv(t)
	base := "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}\nstore: {path: data/t.db}\n"
	c, err := Load(configtest.Write(t, base))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tasks.MaxAge != 6*time.Hour || c.Tasks.UnknownGrace != time.Minute {
		t.Fatalf("defaults: max_age %v, unknown_grace %v", c.Tasks.MaxAge, c.Tasks.UnknownGrace)
	}
	c, err = Load(configtest.Write(t, base+"tasks: {max_age: 90m, unknown_grace: 30s}\n"))
	if err != nil || c.Tasks.MaxAge != 90*time.Minute || c.Tasks.UnknownGrace != 30*time.Second {
		t.Fatalf("set: %+v %v", c, err)
	}
	for yaml, want := range map[string]string{
		"max_age: 0s":          "tasks.max_age is 0s: give a duration from 1s to 720h0m0s, e.g. 6h",
		"max_age: -1h":         "tasks.max_age is -1h0m0s",
		"max_age: 721h":        "tasks.max_age is 721h0m0s",
		"max_age: 6":           "is the number 6: write a duration with its unit, such as 6s",
		"max_age: six hours":   `is "six hours": write a duration such as 30s`,
		"unknown_grace: 500ms": "tasks.unknown_grace is 500ms: give a duration from 1s to 1h0m0s, e.g. 1m",
		"unknown_grace: 2h":    "tasks.unknown_grace is 2h0m0s",
		"max_agee: 6h":         "max_agee",
	} {
		_, err := Load(configtest.Write(t, base+"tasks: {"+yaml+"}\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", yaml, err, want)
		}
	}
}
