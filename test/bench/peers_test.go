package main

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestTableWriterRepeatsTheMachineUnderEveryTable(t *testing.T) {
	var b strings.Builder
	w := &tableWriter{w: &b, line: "[m]"}
	// Writes split mid-line, as Fprintf calls may.
	for _, p := range []string{"intro\n== one", " ==\nrow\n", "== two ==\n", "tail"} {
		w.Write([]byte(p))
	}
	w.flush()
	want := "intro\n== one ==\n[m]\nrow\n== two ==\n[m]\ntail"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

func TestParseRates(t *testing.T) {
	if r, err := parseRates("200, 500,1000"); err != nil || len(r) != 3 || r[2] != 1000 {
		t.Fatalf("parseRates: %v %v", r, err)
	}
	if r, err := parseRates(""); err != nil || len(r) != 0 {
		t.Fatalf("empty: %v %v", r, err)
	}
	for _, bad := range []string{"0", "-5", "fast"} {
		if _, err := parseRates(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestProcessGroupSumsItsMembers(t *testing.T) {
	self := os.Getpid()
	pgid := self
	if raw, err := os.ReadFile("/proc/self/stat"); err == nil {
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if n, err := strconv.Atoi(f[2]); err == nil {
			pgid = n
		}
	}
	found := false
	for _, pid := range groupPIDs(pgid) {
		found = found || pid == self
	}
	if !found {
		t.Fatalf("process group %d does not list this process %d", pgid, self)
	}
	if m, err := procMem(proc{"group", -pgid}); err != nil || m.rss <= 0 || m.pss <= 0 {
		t.Fatalf("group memory: %+v %v", m, err)
	}
}

func TestCompareAddsALatencyPathAndNeedsItsBinary(t *testing.T) {
	o, err := parseFlags([]string{"-compare", "old/tollway"}, &strings.Builder{})
	if err != nil || !slices.Equal(o.paths, append(slices.Clone(allPaths), pathCompare)) || o.binFor(pathCompare) != "old/tollway" {
		t.Fatalf("-compare: paths %v, err %v", o.paths, err)
	}
	if o, err := parseFlags(nil, &strings.Builder{}); err != nil || slices.Contains(o.paths, pathCompare) {
		t.Fatalf("no -compare: paths %v, err %v", o.paths, err)
	}
	for _, args := range [][]string{{"-only", "tollway,compare"}, {"-peer-paths", "tollway,compare"}} {
		if _, err := parseFlags(args, &strings.Builder{}); err == nil {
			t.Fatalf("%v accepted without -compare", args)
		}
	}
}

func TestStreamsFlags(t *testing.T) {
	o, err := parseFlags(nil, &strings.Builder{})
	if err != nil || !slices.Equal(o.holdAfter, []int{1, 300}) || o.openStreams != 1000 || !o.has("streams") || !o.has("peers") || o.has("soak") {
		t.Fatalf("defaults: hold-after %v, open-streams %d, scenarios %v, err %v", o.holdAfter, o.openStreams, o.scenarios, err)
	}
	for _, args := range [][]string{{"-hold-after", "0"}, {"-hold-pause", "60s"}, {"-stream-rate", "0"}, {"-open-streams", "-1"}} {
		if _, err := parseFlags(args, &strings.Builder{}); err == nil {
			t.Fatalf("%v accepted", args)
		}
	}
}
