package translator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollway/tollway/xds/translator"
)

// BenchmarkStreamMeter is the CPU the stream meter adds to Envoy per streamed chunk. One Envoy
// (one worker) serves the same answers on four listeners: Envoy alone (router only); the filter
// in the chain for an answer not in the fast lane (other); the fast lane as shipped (text_bytes
// published every StreamMeterLagBytes bytes); and the fast lane publishing it at every
// chunk (every). Each streams answers of two lengths, a content chunk a millisecond (each chunk
// its own read); the slope between the lengths is the CPU of one more chunk, whatever a request
// costs on its own. The host is shared, so the listeners take turns in small batches (each sees
// the same load over a round) and Envoy's CPU is read in nanoseconds: the sum of its threads'
// /proc/<pid>/task/<tid>/schedstat (/proc/<pid>/stat counts 10 ms ticks, too coarse for a batch;
// its total over the run is printed beside, as a check). Run it with -benchtime=5x for five
// rounds; the median round is reported.
func BenchmarkStreamMeter(b *testing.B) {
	script := translator.StreamMeter().GetDefaultSourceCode().GetInlineString()
	every := strings.Replace(script, "local LAG_BYTES = 64\n", "local LAG_BYTES = 1\n", 1)
	if every == script {
		b.Fatal("the script has no LAG_BYTES = 64 to vary")
	}
	fast := map[string]any{"fast": true, "model": catalogModel, "drop_usage": true, "request_id": requestID}
	lanes := []meterLane{{name: "alone"}, {name: "other", lua: "-"}, {name: "fast", lane: fast, lua: "-"}, {name: "every", lane: fast, lua: every}}
	e := startMeterEnvoy(b, lanes, 1)
	const streams, batches, parallel = 320, 8, 16
	lengths := []int{10, 110}
	for _, n := range lengths {
		e.provider.add("bench-"+strconv.Itoa(n), &sseAnswer{pieces: benchAnswer(n), delay: time.Millisecond})
	}
	for _, l := range lanes { // warm up, and check each lane answers as it should
		body := fetch(b, e, l.name, "bench-10")
		if rewritten := !strings.Contains(body, providerModel); rewritten != (l.lane != nil) {
			b.Fatalf("%s: the model member was rewritten: %v\n%s", l.name, rewritten, body)
		}
		streamMany(b, e, l.name, "bench-10", parallel, parallel)
	}
	pid := e.cmd.Process.Pid
	// perStream[lane][length] is each round's CPU per stream, in us.
	perStream := map[string][][]float64{}
	for _, l := range lanes {
		perStream[l.name] = make([][]float64, len(lengths))
	}
	var byStat, bySched time.Duration
	b.ResetTimer()
	for round := range b.N {
		cpu := map[string][]time.Duration{}
		s0, t0 := processCPU(b, pid), threadsCPU(b, pid)
		for batch := range batches {
			for k := range lanes { // each batch starts with another listener
				l := lanes[(k+batch+round)%len(lanes)]
				if cpu[l.name] == nil {
					cpu[l.name] = make([]time.Duration, len(lengths))
				}
				for j, n := range lengths {
					c0 := threadsCPU(b, pid)
					streamMany(b, e, l.name, "bench-"+strconv.Itoa(n), streams/batches, parallel)
					cpu[l.name][j] += threadsCPU(b, pid) - c0
				}
			}
		}
		byStat += processCPU(b, pid) - s0
		bySched += threadsCPU(b, pid) - t0
		for _, l := range lanes {
			for j := range lengths {
				perStream[l.name][j] = append(perStream[l.name][j], float64(cpu[l.name][j].Nanoseconds())/1e3/streams)
			}
		}
	}
	b.StopTimer()
	// The slope between the lengths is one chunk's CPU; a round's slopes are compared with the
	// same round's Envoy alone, and the median round is reported (the host is shared).
	slope, extra := map[string]float64{}, map[string]float64{}
	for _, l := range lanes {
		var s, x []float64
		for r := range b.N {
			s = append(s, (perStream[l.name][1][r]-perStream[l.name][0][r])/float64(lengths[1]-lengths[0]))
			x = append(x, s[r]-(perStream["alone"][1][r]-perStream["alone"][0][r])/float64(lengths[1]-lengths[0]))
		}
		slope[l.name], extra[l.name] = median(s), median(x)
		fmt.Fprintf(os.Stdout, "%s: each round's us per chunk %.1f, over alone %.1f\n", l.name, s, x)
	}
	fmt.Fprintf(os.Stdout, "\nEnvoy CPU (1 worker): %d rounds of %d streams per listener and length in %d batches, %d at a time, a chunk every 1 ms; medians of the rounds\n",
		b.N, streams, batches, parallel)
	fmt.Fprintf(os.Stdout, "Envoy's CPU over the rounds: %.2f s by its threads' schedstat, %.2f s by /proc/%d/stat\n", bySched.Seconds(), byStat.Seconds(), pid)
	fmt.Fprintf(os.Stdout, "%-8s %16s %16s %14s %14s\n", "listener", fmt.Sprintf("us/stream %d", lengths[0]), fmt.Sprintf("us/stream %d", lengths[1]), "us per chunk", "over alone")
	for _, l := range lanes {
		fmt.Fprintf(os.Stdout, "%-8s %16.1f %16.1f %14.2f %+14.2f\n", l.name, median(perStream[l.name][0]), median(perStream[l.name][1]), slope[l.name], extra[l.name])
	}
	fmt.Fprintf(os.Stdout, "fast lane: %+.2f us per chunk over Envoy alone (%.2fx); publishing text_bytes at every chunk instead: %+.2f us\n",
		extra["fast"], slope["fast"]/slope["alone"], extra["every"]-extra["fast"])
	b.ReportMetric(slope["alone"], "us-alone/chunk")
	b.ReportMetric(extra["fast"], "us-extra/chunk")
	b.ReportMetric(slope["fast"]/slope["alone"], "x-alone")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchAnswer is an OpenAI stream of n content chunks (a word each, the provider's model to
// rewrite), the finish, the usage chunk and [DONE].
func benchAnswer(n int) []string {
	out := []string{chunk(providerModel, `{"role":"assistant","content":""}`, "null")}
	for i := range n {
		out = append(out, chunk(providerModel, `{"content":" word`+strconv.Itoa(i)+`"}`, "null"))
	}
	return append(out, chunk(providerModel, `{}`, `"stop"`), usageChunk(providerModel), done)
}

// fetch streams one answer and returns what the client got.
func fetch(b *testing.B, e *meterEnvoy, lane, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.get(ctx, lane, id)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("%s: %v %d %s", lane, err, res.StatusCode, body)
	}
	return string(body)
}

// streamMany streams total answers through lane, parallel at a time, each read to its end.
func streamMany(b *testing.B, e *meterEnvoy, lane, id string, total, parallel int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(total) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := e.get(ctx, lane, id)
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if err == nil && res.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				cancel()
				if err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("%s: %v", lane, err)
	}
}

// threadsCPU is the CPU the process's threads have run so far, in nanoseconds (the first field
// of each /proc/<pid>/task/<tid>/schedstat).
func threadsCPU(b *testing.B, pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // a thread that just ended
		}
		ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		if err != nil {
			b.Fatalf("schedstat of %d/%s: %s", pid, t.Name(), raw)
		}
		sum += time.Duration(ns)
	}
	return sum
}

// processCPU is the user+system CPU the process has used so far, all threads (/proc/<pid>/stat
// fields 14 and 15, in clock ticks of 10 ms).
func processCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %s", pid, raw)
	}
	return time.Duration(u+st) * 10 * time.Millisecond
}
