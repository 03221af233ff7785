package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
)

// This file owns what is walked: the scenario test, the phases of it that are counted, the
// stubs it wires in place of production code, and the steps that define the seams.

const module = "github.com/tollway/tollway/"

// scenario says how to read one scenario test's trace.
type scenario struct {
	Package string // the package whose test is traced
	Test    string // the test's name
	Marker  string // the function the test calls between phases (its argument names the phase)
	Entries []string
	Phases  []string // the phases counted, in order
	Titles  map[string]string
	// Stubs are test functions that stand in for production code the package cannot import:
	// a call of one counts as the calls the production code makes (file and name).
	Stubs map[string][]stubCall
	Steps []step
}

type stubCall struct {
	File, Name string
	Calls      []stubCall
}

// step is a point the request passes on its way (a message handed to its processor, the plan,
// the hold, the adapter, the meter, the settlement): every file on the stack when one is
// reached is a seam.
type step struct {
	What string
	Func *regexp.Regexp
}

func (s *scenario) step(name string) bool {
	for _, st := range s.Steps {
		if st.Func.MatchString(name) {
			return true
		}
	}
	return false
}

// checkStubs fails when a stub names a file the repository no longer has: the mapping would
// count a file that is gone.
func (s *scenario) checkStubs(root string) error {
	var check func([]stubCall) error
	check = func(calls []stubCall) error {
		for _, c := range calls {
			if _, err := os.Stat(filepath.Join(root, c.File)); err != nil {
				return fmt.Errorf("walk: a stub stands for %s, which is gone; update test/walk/config.go", c.File)
			}
			if err := check(c.Calls); err != nil {
				return err
			}
		}
		return nil
	}
	for _, calls := range s.Stubs {
		if err := check(calls); err != nil {
			return err
		}
	}
	return nil
}

const (
	metricsFile = "cmd/tollway/internal/metrics/metrics.go"
	settlerFile = "store/settle/settler.go"
)

// metric is a call of cmd/tollway/internal/metrics.Metrics.
func metric(name string, calls ...stubCall) []stubCall {
	return []stubCall{{File: metricsFile, Name: "(*Metrics)." + name, Calls: calls}}
}

// The walk: one streamed chat completion in OpenAI's chat API answered by Anthropic
// (extproc/walk_test.go), as Tollway's defaults serve it: billing on, metrics on, the access
// log on, tracing off, store.driver bbolt (its settler), no rate limits, and routing.fast_lane
// on, so the gateway is split (docs/architecture.md, "The split answer"): the router-level
// stream reads the request and parks its exchange, and a translated stream's answer goes on the
// chunk lane, read by the answer filter's stream, which adopts the exchange. chatUnsplit is the
// same chat on a routing.fast_lane: false gateway: the router-level stream reads the answer too.
var (
	chatToAnthropic = &scenario{
		Package: "./extproc",
		Test:    "TestWalkScenario",
		Marker:  module + "extproc.WalkMark",
		Entries: []string{module + "extproc.(*Server).Process"},
		Phases:  append([]string{"router-request", "router-close"}, answerPhases("answer")...),
		Titles: titles(map[string]string{
			"router-request":          "Router stream (router-level filter, split): request headers and body, pipelined; the exchange parked",
			"router-close":            "Router stream ends once the request is read (Done: the parked exchange is not ended here)",
			"answer-response-headers": "Answer stream (the chunk lane's answer filter): response headers; the exchange adopted",
			"answer-typical":          "Answer stream: the same chunk (answer, meter, checkpoint)",
			"answer-last":             "Answer stream: the last chunk, end_of_stream (meter, settle, bill, access log)",
			"answer-close":            "Answer stream ends (the exchange released and Done, observer)",
		}),
		Stubs: walkStubs,
		Steps: slices.Concat(walkSteps, splitSteps),
	}
	chatUnsplit = &scenario{
		Package: "./extproc",
		Test:    "TestWalkUnsplit",
		Marker:  module + "extproc.WalkMark",
		Entries: []string{module + "extproc.(*Server).Process"},
		Phases:  append([]string{"router-request"}, answerPhases("router")...),
		Titles: titles(map[string]string{
			"router-request":          "Router stream (router-level filter): request headers and body, pipelined",
			"router-response-headers": "Router stream: response headers",
			"router-typical":          "Router stream: the same chunk (answer, meter, checkpoint)",
			"router-last":             "Router stream: the last chunk, end_of_stream (meter, settle, bill, access log)",
			"router-close":            "Router stream ends (Done, observer)",
		}),
		Stubs: walkStubs,
		Steps: walkSteps,
	}
)

// answerPhases are the phases counted from the attempt's request on, the answer read on side's
// stream (router: unsplit, answer: the answer filter's).
func answerPhases(side string) []string {
	return []string{
		"attempt-request", "attempt-response-headers", side + "-response-headers", "attempt-typical", side + "-typical",
		"attempt-last", side + "-last", "attempt-close", side + "-close",
	}
}

// titles are the attempt's phases' titles (alike on both gateways) and own.
func titles(own map[string]string) map[string]string {
	t := map[string]string{
		"attempt-request":          "Attempt stream (upstream filter): request headers, request body (rewritten for Anthropic)",
		"attempt-response-headers": "Attempt stream: response headers",
		"attempt-typical":          "Attempt stream: one typical chunk (Anthropic SSE to an OpenAI chunk)",
		"attempt-last":             "Attempt stream: the last chunk, end_of_stream (usage chunk, [DONE])",
		"attempt-close":            "Attempt stream ends",
	}
	maps.Copy(t, own)
	return t
}

// walkStubs map the scenario's stubs to the production code they stand for.
var walkStubs = map[string][]stubCall{
	module + "extproc.walkObserver.StreamStarted": metric("StreamStarted"),
	module + "extproc.walkObserver.StreamEnded":   metric("StreamEnded"),
	module + "extproc.walkObserver.RequestDone":   metric("RequestDone"),
	module + "extproc.walkObserver.Held":          metric("Held"),
	module + "extproc.walkObserver.Ended":         metric("Ended"),
	module + "extproc.walkRecord": {{File: "cmd/tollway/internal/server/observe.go", Name: "observe.func1 (the bill.Record wrapper)", Calls: []stubCall{
		metric("Usage", stubCall{File: "cmd/tollway/internal/metrics/decimal.go", Name: "(*decimalCounter).add"})[0],
		{File: settlerFile, Name: "(*Settler).Record"},
	}}},
	module + "extproc.walkHold": {{File: settlerFile, Name: "(*Settler).Hold"}},
	module + "extproc.walkEnd":  {{File: settlerFile, Name: "(*Settler).End"}},
}

// walkSteps are the steps of the request on either gateway.
var walkSteps = []step{
	{"a message handed to the request's processor or the attempt's",
		regexp.MustCompile(`^` + regexp.QuoteMeta(module) + `extproc/chat\.\(\*(Processor|Attempt)\)\.(RequestHeaders|RequestBody|ResponseHeaders|ResponseBody|Done)$`)},
	{"the plan", regexp.MustCompile(`^` + regexp.QuoteMeta(module) + `extproc/chat\.planChat$`)},
	{"the ledger: the hold taken, settled or released",
		regexp.MustCompile(`^` + regexp.QuoteMeta(module) + `extproc/billing\.\(\*Ledger\)\.(Reserve|Settle|Release)$`)},
	{"the adapter chosen", regexp.MustCompile(`^` + regexp.QuoteMeta(module) + `extproc/provider/chat\.For$`)},
	{"the adapter: the request rewritten, the answer translated",
		regexp.MustCompile(`^` + regexp.QuoteMeta(module) + `extproc/provider/chat\.(\(\*)?\w+\)?\.(Chat|Chunk|Body)$`)},
	{"the meter", regexp.MustCompile(`^` + regexp.QuoteMeta(module) + `extproc/chat\.\(\*meter\)\.(body|event|result)$`)},
}

// splitSteps are the split gateway's own: the exchange handed over from the router-level
// stream to the answer filter's. The hand-over is matched in chat's handOver, not in the
// book's park it calls: park is reached through a closure written in stream.go (open's
// x.Park), which the detour rule would read as a callback and cut the files that hand the
// request on (pipeline.go, chat/processor.go, chat/lane.go) out of its chain.
var splitSteps = []step{
	{"the hand-over: the exchange parked for its answer's filter, adopted by the answer filter's stream",
		regexp.MustCompile(`^` + regexp.QuoteMeta(module) + `extproc(/chat\.\(\*Processor\)\.handOver|\.\(\*answerBook\)\.adopt)$`)},
}
