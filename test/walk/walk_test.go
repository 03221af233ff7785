package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestWalkRules: the counting rules on a small trace. Envoy enters a.go; two calls from one
// invocation into b.go are one visit; the reader returns to a.go (a hop back) before its call
// into c.go; c.go's callback through d.go into c.go is followed, but d.go is no seam; test code
// (the client) counts nothing; a stub counts as the production calls it stands for; a phase
// left out counts nothing.
func TestWalkRules(t *testing.T) {
	funcs := map[string]string{
		"m/x.Process": "x/a.go", "m/x.g": "x/b.go", "m/x.h": "x/b.go", "m/x.k": "x/c.go",
		"m/x.(*F).Feed": "x/d.go", "m/x.k.func1": "x/c.go", "m/x.step": "x/e.go",
		"m/x.TestClient": "x/a_test.go", "m/x.stubObs": "x/a_test.go", "m/x.Mark": "x/a_test.go",
	}
	trace := strings.Join([]string{
		`> goroutine(1): m/x.TestClient()`,
		`> goroutine(1): m/x.Mark("walked")`,
		`>> goroutine(1): m/x.Mark => ()`,
		`> goroutine(1): m/x.g()`, // the client calling the package: not the walk
		`>> goroutine(1): m/x.g => ()`,
		`> goroutine(7): m/x.Process(("*m/x.S")(0x1))`,
		`> goroutine(7): m/x.g()`,
		`>> goroutine(7): m/x.g => ()`,
		`> goroutine(7): m/x.h()`,
		`>> goroutine(7): m/x.h => ()`,
		`> goroutine(7): m/x.k()`,
		`> goroutine(7): m/x.(*F).Feed(("*m/x.F")(0x2))`,
		`> goroutine(7): m/x.k.func1()`,
		`> goroutine(7): m/x.step()`,
		`>> goroutine(7): m/x.step => ()`,
		`>> goroutine(7): m/x.k.func1 => ()`,
		`>> goroutine(7): m/x.(*F).Feed => ()`,
		`>> goroutine(7): m/x.k => ()`,
		`> goroutine(7): m/x.stubObs()`,
		`>> goroutine(7): m/x.stubObs => ()`,
		`> goroutine(1): m/x.Mark("skipped")`,
		`> goroutine(7): m/x.k()`,
		`>> goroutine(7): m/x.k => ()`,
	}, "\n")
	sc := &scenario{
		Marker: "m/x.Mark", Entries: []string{"m/x.Process"}, Phases: []string{"walked"},
		Stubs: map[string][]stubCall{"m/x.stubObs": {{File: "metrics.go", Name: "Observe"}}},
		Steps: []step{{"the step", regexp.MustCompile(`^m/x\.step$`)}},
	}
	events, err := parseTrace(strings.NewReader(trace), funcs)
	if err != nil {
		t.Fatal(err)
	}
	r := newWalker(sc, funcs).run(events).count()
	var got []string
	for _, h := range r.Hops {
		s := h.From + ">" + h.To
		if h.Back {
			s += "(back)"
		}
		got = append(got, s)
	}
	want := []string{
		"Envoy>x/a.go", "x/a.go>x/b.go", "x/b.go>x/a.go(back)", "x/a.go>x/c.go", "x/c.go>x/d.go",
		"x/d.go>x/c.go(back)", "x/c.go>x/e.go", "x/e.go>x/a.go(back)", "x/a.go>metrics.go",
	}
	if !slices.Equal(got, want) {
		t.Errorf("hops:\n got %v\nwant %v", got, want)
	}
	if len(r.Calls) != 7 || r.CallsBack != 1 || r.HopsBack != 3 {
		t.Errorf("calls %d (back %d), hops back %d; want 7 (1), 3", len(r.Calls), r.CallsBack, r.HopsBack)
	}
	if !slices.Equal(r.Calls[1].Names, []string{"m/x.g", "m/x.h"}) {
		t.Errorf("the run of calls into b.go: %v, want one visit of g and h", r.Calls[1].Names)
	}
	if want := []string{"x/a.go", "x/c.go", "x/e.go"}; !slices.Equal(r.Seams, want) {
		t.Errorf("seams %v, want %v", r.Seams, want)
	}
	if want := []string{".", "x"}; !slices.Equal(r.Packages, want) || len(r.Files) != 6 {
		t.Errorf("files %v packages %v; want 6 files in %v", r.Files, r.Packages, want)
	}
}
