package extproc

import (
	"testing"

	"github.com/tollway/tollway/store"
)

func TestCompile(t *testing.T) {
	g := testGateway()
	bad := keyRecord("key_badhash", testSecret(9), false)
	bad.Hash = "zz" + bad.Hash[2:]
	short := keyRecord("key_short", testSecret(10), false)
	short.Hash = short.Hash[:62]
	rt := Compile(g, []store.Key{
		keyRecord("key_valid", validSecret, false),
		keyRecord("key_revoked", revokedSecret, true),
		bad, short,
	})
	if len(rt.keys) != 1 {
		t.Fatalf("compiled %d keys, want 1 (revoked and undecodable hashes skipped)", len(rt.keys))
	}
	k := rt.keys[store.HashKey(validSecret)]
	if k == nil || k.ID != "key_valid" || k.Account != "acct-key_valid" {
		t.Fatalf("valid key compiled as %+v", k)
	}
	if rt.keys[store.HashKey(revokedSecret)] != nil {
		t.Error("revoked key compiled")
	}
	if len(rt.models) != len(g.Models) || len(rt.providers) != len(g.Providers) {
		t.Errorf("compiled %d models, %d providers; want %d, %d", len(rt.models), len(rt.providers), len(g.Models), len(g.Providers))
	}
	if m := rt.models["gpt"]; m == nil || !m.supported["temperature"] || m.supported["top_k"] {
		t.Errorf("gpt supported set = %v", m.supported)
	}
	if m := rt.models["free"]; m == nil || m.supported != nil {
		t.Errorf("free supported set = %v, want nil (everything passes)", m.supported)
	}
	if p := rt.providers["groq"]; p == nil || p.APIKey != "gsk-groq-secret" || p.BasePath != "/openai/v1" {
		t.Errorf("groq provider = %+v", p)
	}
}
