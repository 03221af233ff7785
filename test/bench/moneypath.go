package main

// The money path without Envoy (-scenarios settle, second part): the bench speaks ext_proc to
// billing-on Tollway over its real gRPC socket, exactly the messages Envoy's router-level filter
// sends for a served non-streaming chat request (request headers, buffered request body,
// response headers, buffered response body with usage), at a fixed rate. Every exchange
// authenticates the key, takes a hold against balance and monthly limit, meters the answer,
// settles the ledger and leaves one durable usage record. Envoy and the provider are left out,
// so this is the gateway's own settled-requests ceiling on the machine; the end-to-end settle
// run beside it shows the whole stack.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tollway/tollway/xds/ir"
)

// extprocSocket is Tollway's ext_proc socket, in the runtime directory beside the bootstrap its
// Envoy was started with ("" if that layout changes).
func (t *tollway) extprocSocket() string {
	admin := t.envoyAdmin()
	if admin == "" {
		return ""
	}
	sock := filepath.Join(filepath.Dir(admin), "extproc.sock")
	if _, err := os.Stat(sock); err != nil {
		return ""
	}
	return sock
}

// answerBody is a provider's non-streaming answer, as the fake sends it (usage included).
var answerBody = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1767225600,"model":"fake-llama-3",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, five words here."},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":21,"completion_tokens":7,"total_tokens":28}}`)

// moneyPath is the bench acting as Envoy: one gRPC connection to the ext_proc socket, on which
// each served request is its own stream.
type moneyPath struct {
	conn *grpc.ClientConn
	key  string
	seq  atomic.Int64
}

func dialMoneyPath(sock, key string) (*moneyPath, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &moneyPath{conn: conn, key: key}, nil
}

func hdrs(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// replyKinds are the replies a served request gets, in order (replyNames says them).
var (
	replyKinds = []func(*extprocv3.ProcessingResponse) bool{
		func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestHeaders() != nil },
		func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestBody() != nil },
		func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseHeaders() != nil },
		func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseBody() != nil },
	}
	replyNames = []string{"request headers' reply", "request body's", "answer headers'", "answer body's"}
)

// exchange is one served request's router-level ext_proc stream; it fails on any reply Envoy
// would not have forwarded the request or the answer on.
func (m *moneyPath) exchange(ctx context.Context) (time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	// As Tollway's own Envoy opens it (translator.ExtProc): a request of one attempt is
	// rewritten for its provider on this stream.
	ctx = metadata.AppendToOutgoingContext(ctx, ir.PhaseMetadata, ir.PhaseRouter)
	stream, err := extprocv3.NewExternalProcessorClient(m.conn).Process(ctx)
	if err != nil {
		return 0, 0, err
	}
	id := "bench-direct-" + strconv.FormatInt(m.seq.Add(1), 10)
	msgs := []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(
			":method", "POST", ":path", "/v1/chat/completions", ":authority", "bench", "content-type", "application/json",
			"authorization", "Bearer "+m.key, "x-request-id", id)}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: chatBody, EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(
			":status", "200", "content-type", "application/json", ir.ServedHeader, "fake/"+modelID)}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: answerBody, EndOfStream: true}}},
	}
	// The pipelined protocol: each body right behind its headers, two replies per direction
	// (the headers', held until the body was read, then the body's).
	for i, msg := range msgs {
		if err := stream.Send(msg); err != nil {
			return 0, 0, fmt.Errorf("message %d: %w", i+1, err)
		}
		if i%2 == 0 {
			continue
		}
		for j := i - 1; j <= i; j++ {
			resp, err := stream.Recv()
			if err != nil {
				return 0, 0, fmt.Errorf("reply %d: %w", j+1, err)
			}
			if imm := resp.GetImmediateResponse(); imm != nil {
				return 0, 0, fmt.Errorf("reply %d: refused with %d: %.200s", j+1, imm.GetStatus().GetCode(), imm.GetBody())
			}
			if !replyKinds[j](resp) {
				return 0, 0, fmt.Errorf("reply %d is %T, want the %s", j+1, resp.GetResponse(), replyNames[j])
			}
		}
	}
	if err := stream.CloseSend(); err != nil {
		return 0, 0, err
	}
	total := time.Since(start)
	return 0, total, nil
}

// runMoneyPath drives billing-on Tollway's ext_proc at o.moneyRate for o.settleDuration and
// counts durable records, as runSettle does for the whole stack.
func runMoneyPath(ctx context.Context, o *options, t *target, ps []proc) *settleResult {
	sr := &settleResult{cpu: map[string]time.Duration{}, rate: o.moneyRate, direct: true}
	sock := t.tw.extprocSocket()
	if sock == "" {
		sr.err = errors.New("ext_proc socket not found beside Envoy's bootstrap")
		return sr
	}
	m, err := dialMoneyPath(sock, t.auth)
	if err != nil {
		sr.err = err
		return sr
	}
	defer m.conn.Close()
	load := func(d time.Duration) *result {
		r := openLoop(ctx, o.moneyRate, d, o.maxInFlight, func() (time.Duration, time.Duration, error) { return m.exchange(ctx) })
		t.tally(r)
		return r
	}
	if w := min(o.warmup, time.Second); w > 0 {
		load(w)
	}
	return measureSettle(ctx, o, t, ps, "", sr, func() *result { return load(o.settleDuration) })
}
