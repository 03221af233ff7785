package extproc

import (
	"strings"
	"testing"
	"time"
)

// TestRefusedProviderIsRetriedOnASchedule: a provider refusing the gateway's credential is
// passed over by media creates until refusalRetry after its last refusal, then one create tries
// it (the next waits again); an answer that accepts the credential clears it, and so does a
// config reload. What the admin API and a 503 say names the refusal, not a missing key.
func TestRefusedProviderIsRetriedOnASchedule(t *testing.T) {
	var r refusals
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if !r.mayTry("wan", t0) {
		t.Fatal("a provider that never refused was passed over")
	}
	r.refused("wan", t0)
	r.refused("wan", t0.Add(5*time.Second))
	if r.mayTry("wan", t0.Add(19*time.Second)) {
		t.Fatal("tried again before refusalRetry had passed since the last refusal")
	}
	if !r.mayTry("wan", t0.Add(20*time.Second)) {
		t.Fatal("not tried again refusalRetry after the last refusal")
	}
	if r.mayTry("wan", t0.Add(21*time.Second)) {
		t.Fatal("a second create tried it in the same retry window")
	}
	rf, ok := r.get("wan")
	if !ok || rf.Count != 2 || !rf.Since.Equal(t0) || !rf.Last.Equal(t0.Add(5*time.Second)) || !rf.NextRetry.Equal(t0.Add(35*time.Second)) {
		t.Fatalf("refusal %+v %v", rf, ok)
	}
	why := r.reason("wan")
	for _, want := range []string{"provider wan refused the gateway's credential", "2 times since 2026-05-01T12:00:00Z", "last at 2026-05-01T12:00:05Z", "from 2026-05-01T12:00:35Z", "config reload"} {
		if !strings.Contains(why, want) {
			t.Errorf("reason %q lacks %q", why, want)
		}
	}
	if strings.Contains(why, "no API key") {
		t.Errorf("reason %q says the key is missing", why)
	}
	if !r.accepted("wan", t0.Add(30*time.Second)) || r.has("wan") || r.reason("wan") != "" {
		t.Fatal("an accepted credential did not clear the refusal")
	}
	// Envoy's refusal log comes a flush interval late: a refusal from before the provider's
	// last acceptance is stale and changes nothing.
	if log, _ := r.refused("wan", t0.Add(29*time.Second)); log || r.has("wan") {
		t.Fatal("a refusal older than the last acceptance made the provider refusing again")
	}
	r.refused("wan", t0.Add(31*time.Second))
	r.refused("kling", t0)
	if got := r.forgetAll(); len(got) != 2 || got[0] != "kling" || r.has("wan") {
		t.Fatalf("a reload cleared %v", got)
	}
}
