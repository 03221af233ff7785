// Command walk counts the walk of one streamed chat completion to Anthropic through extproc
// (`make walk`; docs/architecture.md, "The walk, counted"), on the default, split gateway or,
// with -unsplit, on a routing.fast_lane: false one. It builds the extproc test binary
// unoptimized (nothing inlined away), runs its scenario test (extproc/walk_test.go) under
// `dlv trace` with a tracepoint on every function of the module, maps each function to its
// source file from the binary's line table, and applies the counting rules (walk.go) to the
// trace: the files, packages and hops of the full-call walk, and the files along the seams.
// Test code only: nothing of it ships.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	dlv := flag.String("dlv", "dlv", "the Delve binary (make walk installs a pinned one into tools/)")
	traceFile := flag.String("trace", "", "count an existing `dlv trace` output instead of running one (with -bin)")
	bin := flag.String("bin", "", "the test binary the trace ran (with -trace)")
	root := flag.String("root", "", "the source root the binary was built from (default: this module's)")
	verbose := flag.Bool("v", false, "also list every file with its visits and every hop")
	jsonOut := flag.String("json", "", "write the whole count (files, calls, hops, seams) to this file")
	unsplit := flag.Bool("unsplit", false, "walk the unsplit gateway (routing.fast_lane: false) instead of the default, split one")
	flag.Parse()
	sc := chatToAnthropic
	if *unsplit {
		sc = chatUnsplit
	}
	if err := run(sc, *dlv, *traceFile, *bin, *root, *verbose, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(sc *scenario, dlv, traceFile, bin, root string, verbose bool, jsonOut string) error {
	mod, err := moduleRoot()
	if err != nil {
		return err
	}
	if err := sc.checkStubs(mod); err != nil {
		return err
	}
	if root == "" {
		root = mod
	}
	if traceFile == "" {
		dir, err := os.MkdirTemp("", "tollway-walk-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if bin, traceFile, err = trace(sc, dlv, mod, dir); err != nil {
			return err
		}
	} else if bin == "" {
		return errors.New("walk: -trace needs -bin, the test binary that ran it")
	}
	r, err := countTrace(sc, bin, traceFile, root)
	if err != nil {
		return err
	}
	report(os.Stdout, sc, r, verbose)
	if jsonOut != "" {
		b, err := json.MarshalIndent(r, "", " ")
		if err != nil {
			return err
		}
		return os.WriteFile(jsonOut, b, 0o644)
	}
	return nil
}

// countTrace applies the rules to the trace traceFile of the test binary bin, built from root.
func countTrace(sc *scenario, bin, traceFile, root string) (result, error) {
	funcs, err := funcFiles(bin, module, strings.TrimSuffix(root, "/")+"/")
	if err != nil {
		return result{}, err
	}
	f, err := os.Open(traceFile)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	events, err := parseTrace(f, funcs)
	if err != nil {
		return result{}, err
	}
	r := newWalker(sc, funcs).run(events).count()
	if len(r.Calls) == 0 {
		return result{}, fmt.Errorf("walk: the trace %s holds no call of the walk (did the scenario run?)", traceFile)
	}
	return r, nil
}

// moduleRoot is the directory of this module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("walk: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("walk: run it inside the repository (no go.mod found)")
	}
	return filepath.Dir(gomod), nil
}

// trace builds the scenario's test binary into dir and traces its test; it returns the binary
// and the trace.
func trace(sc *scenario, dlv, root, dir string) (bin, out string, err error) {
	bin, out = filepath.Join(dir, "walk.test"), filepath.Join(dir, "trace.txt")
	build := exec.Command("go", "test", "-c", "-gcflags=all=-N -l", "-o", bin, sc.Package)
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", "", fmt.Errorf("walk: build the %s test binary: %w", sc.Package, err)
	}
	tf, err := os.Create(out)
	if err != nil {
		return "", "", err
	}
	defer tf.Close()
	var stdout bytes.Buffer
	cmd := exec.Command(dlv, "trace", "--check-go-version=false", "--wd", filepath.Join(root, sc.Package), "-e", bin,
		"^"+strings.ReplaceAll(module, ".", `\.`), "--", "-test.run", "^"+sc.Test+"$", "-test.count=1")
	cmd.Stdout, cmd.Stderr = &stdout, tf
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("walk: %s trace: %w (is Delve installed? `make walk` installs it)\n%s", dlv, err, stdout.String())
	}
	if !bytes.Contains(stdout.Bytes(), []byte("\nPASS")) && !bytes.HasPrefix(stdout.Bytes(), []byte("PASS")) {
		return "", "", fmt.Errorf("walk: the scenario %s did not pass under the tracer:\n%s", sc.Test, stdout.String())
	}
	return bin, out, nil
}

// report prints the two counts, and with verbose every file's visits and every hop.
func report(w io.Writer, sc *scenario, r result, verbose bool) {
	gateway := "split (routing.fast_lane: true, the default)"
	if sc == chatUnsplit {
		gateway = "unsplit (routing.fast_lane: false)"
	}
	fmt.Fprintf(w, "The walk: one streamed chat completion in OpenAI's chat API, answered by Anthropic, through extproc; the gateway %s\n", gateway)
	fmt.Fprintf(w, "(%s %s traced with dlv; the rules: docs/architecture.md, \"The walk, counted\")\n\n", sc.Package, sc.Test)
	fmt.Fprintf(w, "Following every call: %d files, %d packages, %d hops (%d back); calls only: %d (%d back)\n",
		len(r.Files), len(r.Packages), len(r.Hops), r.HopsBack, len(r.Calls), r.CallsBack)
	fmt.Fprintf(w, "Along the seams: %d files\n", len(r.Seams))
	for i, f := range r.Seams {
		fmt.Fprintf(w, "  %2d. %s\n", i+1, f)
	}
	if len(r.Unknown) > 0 {
		fmt.Fprintf(w, "\nfunctions the binary does not place (not counted): %s\n", strings.Join(r.Unknown, ", "))
	}
	if !verbose {
		return
	}
	fmt.Fprintf(w, "\nFiles, in the order the walk first enters them:\n")
	for i, f := range r.Files {
		fmt.Fprintf(w, "  %2d. %s: entered %s, %d by a call or a stream's start\n", i+1, f, times(r.Entered[f]), r.Called[f])
	}
	printHops(w, sc, r.Hops)
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// printHops lists the hops phase by phase.
func printHops(w io.Writer, sc *scenario, hops []hop) {
	phase := ""
	for i, h := range hops {
		if h.Phase != phase {
			phase = h.Phase
			fmt.Fprintf(w, "\n%s\n", sc.Titles[phase])
		}
		back := ""
		if h.Back {
			back = " (back)"
		}
		what := "return"
		if !h.Return {
			what = shortNames(h.Names)
		}
		fmt.Fprintf(w, "  %3d. %s -> %s: %s%s\n", i+1, h.From, h.To, what, back)
	}
}

// shortNames are a visit's functions without the module's path, each once.
func shortNames(names []string) string {
	var out []string
	for _, n := range names {
		s := strings.ReplaceAll(n, module, "")
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return strings.Join(out, ", ")
}
