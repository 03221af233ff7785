package storetest

import (
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// keyCases: Keys.
var keyCases = []conformance{
	{"keys/create-needs-an-account", func(t *testing.T, e *env) {
		s := e.s
		if _, _, err := s.CreateKey("ghost", store.KeyOptions{}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a key for an absent account: %v", err)
		}
		account(t, s, "acme", "1")
		k, secret, err := s.CreateKey("acme", store.KeyOptions{Name: "ci", MonthlyLimit: decp("5"), Models: []string{"a", "b", "a"}})
		if err != nil {
			t.Fatal(err)
		}
		h := store.HashKey(secret)
		if !store.WellFormedKey(secret) || k.Hash != hex.EncodeToString(h[:]) || k.Account != "acme" || len(k.Models) != 2 || !k.MonthlyLimit.Equal(dec("5")) {
			t.Fatalf("key %+v, secret well formed %v", k, store.WellFormedKey(secret))
		}
		got, err := s.GetKey(k.ID)
		if err != nil || got.Hash != k.Hash || got.Name != "ci" {
			t.Fatalf("GetKey: %+v %v", got, err)
		}
		if _, err := s.GetKey("key_none"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("GetKey of an absent key: %v", err)
		}
		for _, bad := range []store.KeyOptions{{MonthlyLimit: decp("-1")}, {Models: []string{""}}} {
			if _, _, err := s.CreateKey("acme", bad); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("CreateKey %+v: %v", bad, err)
			}
		}
		second := key(t, s, "acme", nil)
		ks, err := s.Keys()
		if err != nil || len(ks) != 2 || ks[0].ID != k.ID || ks[1].ID != second.ID {
			t.Fatalf("Keys, oldest first: %+v %v", ks, err)
		}
	}},
	{"keys/revoke-rotate-and-limits", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "1")
		k := key(t, s, "acme", nil)
		r, secret, err := s.RotateKey(k.ID)
		h := store.HashKey(secret)
		if err != nil || r.ID != k.ID || r.Hash == k.Hash || r.Hash != hex.EncodeToString(h[:]) {
			t.Fatalf("RotateKey: %+v %v", r, err)
		}
		if k, err = s.ChangeKeyLimits(k.ID, store.KeyLimitsChange{SetMonthlyLimit: true, MonthlyLimit: decp("2")}); err != nil || !k.MonthlyLimit.Equal(dec("2")) {
			t.Fatalf("ChangeKeyLimits: %+v %v", k, err)
		}
		if _, err := s.ChangeKeyLimits(k.ID, store.KeyLimitsChange{SetMonthlyLimit: true, MonthlyLimit: decp("-2")}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a negative limit: %v", err)
		}
		if k, err = s.RevokeKey(k.ID); err != nil || k.RevokedAt == nil {
			t.Fatalf("RevokeKey: %+v %v", k, err)
		}
		if _, _, err := s.RotateKey(k.ID); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("rotating a revoked key: %v", err)
		}
		if _, err := s.ChangeKeyLimits(k.ID, store.KeyLimitsChange{SetModels: true}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("limits of a revoked key: %v", err)
		}
		if _, err := s.RevokeKey("key_none"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("revoking an absent key: %v", err)
		}
	}},
	{"keys/concurrent-limit-changes-keep-each-other", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "1")
		k := key(t, s, "acme", nil)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				c := store.KeyLimitsChange{SetMonthlyLimit: true, MonthlyLimit: decp("3")}
				if i%2 == 1 {
					c = store.KeyLimitsChange{SetModels: true, Models: []string{"gpt"}}
				}
				if _, err := s.ChangeKeyLimits(k.ID, c); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got, err := s.GetKey(k.ID)
		if err != nil || got.MonthlyLimit == nil || !got.MonthlyLimit.Equal(dec("3")) || len(got.Models) != 1 {
			t.Fatalf("after concurrent changes of the limit and the models: %+v %v", got, err)
		}
	}},
	{"keys/rate-limits-kept-and-changed-one-by-one", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "1")
		n := func(v int64) *int64 { return &v }
		k, _, err := s.CreateKey("acme", store.KeyOptions{RateLimits: &store.RateLimits{RequestsPerMinute: n(60), TokensPerMinute: n(100000)}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetKey(k.ID); err != nil || rates(got.RateLimits) != "60/100000" {
			t.Fatalf("created with 60 rpm and 100000 tpm: %s %v", rates(got.RateLimits), err)
		}
		steps := []struct {
			c    store.KeyLimitsChange
			want string
		}{
			{store.KeyLimitsChange{RatesChange: store.RatesChange{SetRequestsPerMinute: true, RequestsPerMinute: n(5)}}, "5/100000"},
			{store.KeyLimitsChange{SetMonthlyLimit: true, MonthlyLimit: decp("1")}, "5/100000"},
			{store.KeyLimitsChange{RatesChange: store.RatesChange{SetTokensPerMinute: true}}, "5/-"},
			{store.KeyLimitsChange{RatesChange: store.RatesChange{SetRequestsPerMinute: true}}, "none"},
			{store.KeyLimitsChange{RatesChange: store.RatesChange{SetTokensPerMinute: true, TokensPerMinute: n(7)}}, "-/7"},
		}
		for _, st := range steps {
			if _, err := s.ChangeKeyLimits(k.ID, st.c); err != nil {
				t.Fatal(err)
			}
			if got, err := s.GetKey(k.ID); err != nil || rates(got.RateLimits) != st.want {
				t.Fatalf("after %+v: %s %v, want %s", st.c, rates(got.RateLimits), err, st.want)
			}
		}
		for _, bad := range []store.KeyLimitsChange{{RatesChange: store.RatesChange{SetRequestsPerMinute: true, RequestsPerMinute: n(0)}}, {RatesChange: store.RatesChange{SetTokensPerMinute: true, TokensPerMinute: n(-3)}}} {
			if _, err := s.ChangeKeyLimits(k.ID, bad); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("ChangeKeyLimits %+v: %v", bad, err)
			}
		}
		if _, _, err := s.CreateKey("acme", store.KeyOptions{RateLimits: &store.RateLimits{RequestsPerMinute: n(0)}}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a key with 0 requests per minute: %v", err)
		}
		if got, _ := s.GetKey(k.ID); rates(got.RateLimits) != "-/7" {
			t.Fatalf("a refused change changed the key: %s", rates(got.RateLimits))
		}
	}},
	{"keys/last-used-moves-forward-only", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "1")
		k := key(t, s, "acme", nil)
		at := day0.Add(1500 * time.Millisecond)
		if err := s.SetKeysUsed(map[string]time.Time{k.ID: at, "key_none": at}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetKeysUsed(map[string]time.Time{k.ID: at.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetKey(k.ID)
		if err != nil || got.LastUsedAt == nil || !got.LastUsedAt.Equal(at.Truncate(time.Second)) {
			t.Fatalf("last used %v %v, want %v", got.LastUsedAt, err, at.Truncate(time.Second))
		}
	}},
	{"keys/put-keeps-a-record-as-it-is", func(t *testing.T, e *env) {
		s := e.s
		limit := decimal.RequireFromString("7.5")
		revoked := day0.Add(time.Hour)
		k := store.Key{ID: "key_0123456789abcdef", Hash: "ab12", Prefix: "ale-xxxxxx", Account: "acme", Name: "copied",
			CreatedAt: day0, RevokedAt: &revoked, MonthlyLimit: &limit, Models: []string{"m"}}
		if err := s.PutKey(k); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetKey(k.ID)
		if err != nil || got.Hash != k.Hash || !got.CreatedAt.Equal(day0) || !got.RevokedAt.Equal(revoked) || !got.MonthlyLimit.Equal(limit) || got.Models[0] != "m" {
			t.Fatalf("PutKey then GetKey: %+v %v", got, err)
		}
	}},
}

// accountCases: Accounts.
var accountCases = []conformance{
	{"accounts/create-and-credit", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "zed", "0")
		a, err := s.CreateAccount("acme", dec("10.50"))
		if err != nil || a.ID != "acme" || !a.Balance.Equal(dec("10.5")) || a.CreatedAt.IsZero() {
			t.Fatalf("CreateAccount: %+v %v", a, err)
		}
		if _, err := s.CreateAccount("acme", dec("1")); !errors.Is(err, store.ErrExists) {
			t.Fatalf("a second acme: %v", err)
		}
		for _, bad := range []struct{ id, credits string }{{"", "1"}, {"has space", "1"}, {store.PaidAccountPrefix + "chat", "1"}, {"neg", "-1"}} {
			if _, err := s.CreateAccount(bad.id, dec(bad.credits)); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("CreateAccount(%q, %s): %v", bad.id, bad.credits, err)
			}
		}
		if a, err = s.CreditAccount("acme", dec("0.25")); err != nil || !a.Balance.Equal(dec("10.75")) {
			t.Fatalf("CreditAccount: %+v %v", a, err)
		}
		if _, err := s.CreditAccount("acme", dec("0")); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a zero credit: %v", err)
		}
		if _, err := s.CreditAccount("ghost", dec("1")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("crediting an absent account: %v", err)
		}
		if _, err := s.GetAccount("ghost"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("GetAccount of an absent account: %v", err)
		}
		as, err := s.Accounts()
		if err != nil || len(as) != 2 || as[0].ID != "acme" || as[1].ID != "zed" {
			t.Fatalf("Accounts, by id: %+v %v", as, err)
		}
	}},
}
