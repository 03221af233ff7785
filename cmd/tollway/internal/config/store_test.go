package config

import (
	"strings"
	"testing"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
)

// TestStoreRetentionConfig: store.usage_retention_days defaults to 35, 0 keeps records for good,
// and a value that is not a number of days is refused with the fix in the message.
func TestStoreRetentionConfig(t *testing.T) {
	configtest.ClearEnv(t)
	base := "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}\n"
	c, err := Load(configtest.Write(t, base+"store: {path: data/t.db}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.UsageRetentionDays != 35 {
		t.Errorf("default retention %d days, want 35", c.Store.UsageRetentionDays)
	}
	for yaml, want := range map[string]int{"0": 0, "7": 7, "36500": 36500} {
		c, err := Load(configtest.Write(t, base+"store: {path: data/t.db, usage_retention_days: "+yaml+"}\n"))
		if err != nil {
			t.Fatalf("usage_retention_days %s: %v", yaml, err)
		}
		if c.Store.UsageRetentionDays != want {
			t.Errorf("usage_retention_days %s read as %d", yaml, c.Store.UsageRetentionDays)
		}
	}
	t.Setenv("TOLLWAY_STORE_USAGE_RETENTION_DAYS", "3")
	if c, err := Load(configtest.Write(t, base+"store: {path: data/t.db}\n")); err != nil || c.Store.UsageRetentionDays != 3 {
		t.Errorf("environment override: %+v, %v", c, err)
	}
	t.Setenv("TOLLWAY_STORE_USAGE_RETENTION_DAYS", "")
	for _, key := range []string{"usage_retention_days", "task_retention_days"} {
		for _, bad := range []string{"-1", "36501", "forever"} {
			_, err := Load(configtest.Write(t, base+"store: {path: data/t.db, "+key+": "+bad+"}\n"))
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("%s %s: %v, want an error naming the key", key, bad, err)
			}
		}
	}
	for _, bad := range []string{"0", "-1", "8785", "forever"} {
		if _, err := Load(configtest.Write(t, base+"store: {path: data/t.db, image_retention_hours: "+bad+"}\n")); err == nil || !strings.Contains(err.Error(), "image_retention_hours") {
			t.Errorf("image_retention_hours %s: %v, want an error naming the key", bad, err)
		}
	}
	if c.Store.ImageRetentionHours != 24 {
		t.Errorf("default image retention %d hours, want 24", c.Store.ImageRetentionHours)
	}
	if c.Store.TaskRetentionDays != 30 {
		t.Errorf("default task retention %d days, want 30", c.Store.TaskRetentionDays)
	}
	if c, err := Load(configtest.Write(t, base+"store: {path: data/t.db, task_retention_days: 0}\n")); err != nil || c.Store.TaskRetentionDays != 0 {
		t.Errorf("task_retention_days 0: %+v %v", c, err)
	}
}
