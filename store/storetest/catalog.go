package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/tollway/tollway/store"
)

// catalogCases: CatalogStore and Routes.
var catalogCases = []conformance{
	{"catalog/config-replaces-its-own-records", func(t *testing.T, e *env) {
		s := e.s
		if err := s.PutProvider(store.Provider{Name: "mine", Type: "openai", BaseURL: "https://a", Source: store.SourceAdmin}); err != nil {
			t.Fatal(err)
		}
		file := store.Catalog{
			Providers: []store.Provider{{Name: "p2", Type: "openai"}, {Name: "p1", Type: "anthropic"}},
			Models:    []store.Model{{ID: "m1", Providers: []store.ModelProvider{{Provider: "p1", Model: "x"}}}},
			Routes:    []store.Route{{ID: "route:r", Name: "r", Rule: "priority_fallback", Models: []string{"m1"}, Status: "active"}},
		}
		if err := s.ReplaceConfig(file); err != nil {
			t.Fatal(err)
		}
		c, err := s.Catalog()
		if err != nil {
			t.Fatal(err)
		}
		if names(c.Providers) != "mine p1 p2" || len(c.Models) != 1 || len(c.Routes) != 1 {
			t.Fatalf("after the file: providers %q, %d models, %d routes", names(c.Providers), len(c.Models), len(c.Routes))
		}
		if c.Providers[1].Source != store.SourceConfig || c.Models[0].Source != store.SourceConfig || c.Routes[0].CreatedAt.IsZero() {
			t.Fatalf("config records: %+v %+v %+v", c.Providers[1], c.Models[0], c.Routes[0])
		}
		created := c.Routes[0].CreatedAt
		// The file drops p2 and keeps its route: p2 goes, the admin's provider stays, the route
		// keeps its creation time.
		file.Providers = file.Providers[1:]
		if err := s.ReplaceConfig(file); err != nil {
			t.Fatal(err)
		}
		if c, err = s.Catalog(); err != nil {
			t.Fatal(err)
		}
		if names(c.Providers) != "mine p1" || !c.Routes[0].CreatedAt.Equal(created) {
			t.Fatalf("after the file changed: providers %q, route created %v (was %v)", names(c.Providers), c.Routes[0].CreatedAt, created)
		}
	}},
	{"catalog/restore-puts-back-exactly", func(t *testing.T, e *env) {
		s := e.s
		before := store.Catalog{
			Providers: []store.Provider{{Name: "a", Type: "openai", Source: store.SourceAdmin}},
			Models:    []store.Model{{ID: "m", Providers: []store.ModelProvider{{Provider: "a", Model: "x"}}, Source: store.SourceAdmin}},
			Routes:    []store.Route{{ID: "route:r", Name: "r", Rule: "priority_fallback", Status: "active", Source: store.SourceAdmin, CreatedAt: day0}},
		}
		if err := s.RestoreCatalog(before); err != nil {
			t.Fatal(err)
		}
		if err := s.PutProvider(store.Provider{Name: "b", Type: "openai"}); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteModel("m"); err != nil {
			t.Fatal(err)
		}
		if err := s.RestoreCatalog(before); err != nil {
			t.Fatal(err)
		}
		got, err := s.Catalog()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, before) {
			t.Fatalf("restored %+v, want %+v", got, before)
		}
	}},
	{"catalog/delete-absent-is-not-found", func(t *testing.T, e *env) {
		if err := e.s.DeleteProvider("nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("DeleteProvider: %v", err)
		}
		if err := e.s.DeleteModel("nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("DeleteModel: %v", err)
		}
	}},
	{"routes/put-keeps-creation-and-pauses", func(t *testing.T, e *env) {
		s := e.s
		if err := s.PutRoute(store.Route{ID: "route:b", Name: "b", Rule: "priority_fallback", Status: "active"}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutRoute(store.Route{ID: "route:a", Name: "a", Rule: "priority_fallback", Status: "active", CreatedAt: day0}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutRoute(store.Route{ID: "route:a", Name: "a2", Rule: "priority_fallback", Status: "active"}); err != nil {
			t.Fatal(err)
		}
		r, err := s.SetRouteStatus("route:a", "paused")
		if err != nil || r.Status != "paused" || r.Name != "a2" || !r.CreatedAt.Equal(day0) {
			t.Fatalf("SetRouteStatus: %+v %v", r, err)
		}
		rs, err := s.Routes()
		if err != nil || len(rs) != 2 || rs[0].ID != "route:a" || rs[0].Status != "paused" || rs[1].CreatedAt.IsZero() {
			t.Fatalf("Routes: %+v %v", rs, err)
		}
		if _, err := s.SetRouteStatus("route:nope", "paused"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("SetRouteStatus of an absent route: %v", err)
		}
	}},
	{"routes/rate-limits", func(t *testing.T, e *env) {
		s := e.s
		two, five := int64(2), int64(5000)
		if err := s.PutRoute(store.Route{ID: "route:r", Name: "r", Rule: "priority_fallback", Status: "active", CreatedAt: day0,
			RateLimits: &store.RateLimits{RequestsPerMinute: &two}}); err != nil {
			t.Fatal(err)
		}
		rs, err := s.Routes()
		if err != nil || len(rs) != 1 || rs[0].RateLimits == nil || *rs[0].RateLimits.RequestsPerMinute != 2 || rs[0].RateLimits.TokensPerMinute != nil {
			t.Fatalf("Routes after PutRoute: %+v %v", rs, err)
		}
		both := func(rpm, tpm *int64) store.RatesChange {
			return store.RatesChange{SetRequestsPerMinute: true, RequestsPerMinute: rpm, SetTokensPerMinute: true, TokensPerMinute: tpm}
		}
		r, err := s.ChangeRouteRateLimits("route:r", both(nil, &five))
		if err != nil || r.RateLimits == nil || r.RateLimits.RequestsPerMinute != nil || *r.RateLimits.TokensPerMinute != 5000 || !r.CreatedAt.Equal(day0) {
			t.Fatalf("ChangeRouteRateLimits: %+v %v", r, err)
		}
		if r, err = s.SetRouteStatus("route:r", "paused"); err != nil || r.RateLimits == nil || *r.RateLimits.TokensPerMinute != 5000 {
			t.Fatalf("SetRouteStatus keeps the rates: %+v %v", r, err)
		}
		cat, err := s.Catalog()
		if err != nil || len(cat.Routes) != 1 || cat.Routes[0].RateLimits == nil || *cat.Routes[0].RateLimits.TokensPerMinute != 5000 {
			t.Fatalf("Catalog: %+v %v", cat.Routes, err)
		}
		zero := int64(0)
		if _, err := s.ChangeRouteRateLimits("route:r", both(&zero, nil)); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a rate of 0: %v", err)
		}
		if r, err = s.ChangeRouteRateLimits("route:r", both(nil, nil)); err != nil || r.RateLimits != nil {
			t.Fatalf("ChangeRouteRateLimits(none): %+v %v", r, err)
		}
		if _, err := s.ChangeRouteRateLimits("route:nope", both(nil, nil)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("ChangeRouteRateLimits of an absent route: %v", err)
		}
	}},
	{"routes/rate-changes-merge", func(t *testing.T, e *env) {
		s := e.s
		if err := s.PutRoute(store.Route{ID: "route:r", Name: "r", Rule: "priority_fallback", Status: "active", CreatedAt: day0}); err != nil {
			t.Fatal(err)
		}
		n := func(v int64) *int64 { return &v }
		for _, st := range []struct {
			c    store.RatesChange
			want string
		}{
			{store.RatesChange{SetRequestsPerMinute: true, RequestsPerMinute: n(10)}, "10/-"},
			{store.RatesChange{SetTokensPerMinute: true, TokensPerMinute: n(5000)}, "10/5000"},
			{store.RatesChange{}, "10/5000"},
			{store.RatesChange{SetRequestsPerMinute: true}, "-/5000"},
			{store.RatesChange{SetRequestsPerMinute: true, SetTokensPerMinute: true}, "none"},
		} {
			r, err := s.ChangeRouteRateLimits("route:r", st.c)
			if err != nil || rates(r.RateLimits) != st.want || !r.CreatedAt.Equal(day0) {
				t.Fatalf("ChangeRouteRateLimits(%+v): %+v %s %v, want %s", st.c, r, rates(r.RateLimits), err, st.want)
			}
			if rs, err := s.Routes(); err != nil || rates(rs[0].RateLimits) != st.want {
				t.Fatalf("stored after %+v: %+v %v, want %s", st.c, rs, err, st.want)
			}
		}
		if _, err := s.ChangeRouteRateLimits("route:r", store.RatesChange{SetTokensPerMinute: true, TokensPerMinute: n(0)}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a rate of 0: %v", err)
		}
		if _, err := s.ChangeRouteRateLimits("route:nope", store.RatesChange{SetTokensPerMinute: true}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("ChangeRouteRateLimits of an absent route: %v", err)
		}
	}},
	{"routes/concurrent-rate-changes-keep-each-other", func(t *testing.T, e *env) {
		// Two replicas change different rates of one route at the same moment: a store several
		// gateways share gets a second handle on the same data, the others one handle.
		s, other := e.s, e.s
		if _, shared := s.(store.Budgets); shared {
			other = e.open(t)
		}
		if err := s.PutRoute(store.Route{ID: "route:r", Name: "r", Rule: "priority_fallback", Status: "active", CreatedAt: day0}); err != nil {
			t.Fatal(err)
		}
		lost := 0 // rounds that lost a change
		for round := range int64(50) {
			if _, err := s.ChangeRouteRateLimits("route:r", store.RatesChange{SetRequestsPerMinute: true, SetTokensPerMinute: true}); err != nil {
				t.Fatal(err)
			}
			rpm, tpm := round+1, round+1000
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, c := range []store.RatesChange{{SetRequestsPerMinute: true, RequestsPerMinute: &rpm}, {SetTokensPerMinute: true, TokensPerMinute: &tpm}} {
				wg.Go(func() {
					<-start
					if _, err := []store.Store{s, other}[i].ChangeRouteRateLimits("route:r", c); err != nil {
						t.Error(err)
					}
				})
			}
			close(start)
			wg.Wait()
			rs, err := other.Routes()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := rates(rs[0].RateLimits), fmt.Sprintf("%d/%d", rpm, tpm); got != want {
				lost++
				if lost == 1 {
					t.Logf("round %d: the route's rates are %s, want %s", round, got, want)
				}
			}
		}
		if lost > 0 {
			t.Fatalf("%d of 50 rounds lost one of two concurrent rate changes", lost)
		}
	}},
}

// rates is r as "rpm/tpm", "-" for a rate not set, "none" for none.
func rates(r *store.RateLimits) string {
	if r == nil {
		return "none"
	}
	f := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprint(*v)
	}
	return f(r.RequestsPerMinute) + "/" + f(r.TokensPerMinute)
}

func names(ps []store.Provider) string {
	out := ""
	for i, p := range ps {
		if i > 0 {
			out += " "
		}
		out += p.Name
	}
	return out
}
