package extproc

import (
	"fmt"

	"github.com/tollway/tollway/extproc/chat"
	"github.com/tollway/tollway/extproc/core"

	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/xds/ir"
)

func TestAuthenticate(t *testing.T) {
	rt := testRuntime()
	tests := []struct {
		name string
		auth string
		want *core.APIError
	}{
		{"missing header", "", core.ErrMissingKey},
		{"basic scheme", "Basic dXNlcjpwYXNz", core.ErrMissingKey},
		{"bare key", validSecret, core.ErrMissingKey},
		{"bearer without key", "Bearer", core.ErrMissingKey},
		{"bearer with empty key", "Bearer ", core.ErrMissingKey},
		{"malformed short", "Bearer ale-abc", core.ErrMalformedKey},
		{"malformed prefix", "Bearer sk-" + strings.TrimPrefix(validSecret, "ale-"), core.ErrMalformedKey},
		{"malformed truncated", "Bearer " + validSecret[:len(validSecret)-1], core.ErrMalformedKey},
		{"unknown", "Bearer " + unknownSecret, core.ErrInvalidKey},
		{"revoked", "Bearer " + revokedSecret, core.ErrInvalidKey},
		{"valid", "Bearer " + validSecret, nil},
		{"valid lowercase scheme", "bearer " + validSecret, nil},
		{"valid with extra spaces", "Bearer  " + validSecret + " ", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := NewServer(nil, rt, nil).newExchange(rt)
			got := x.Authenticate(tt.auth)
			if got != tt.want {
				t.Fatalf("authenticate(%q) = %v, want %v", tt.auth, got, tt.want)
			}
			if tt.want == nil {
				if x.Key == nil || x.Key.ID != "key_valid" {
					t.Errorf("authenticated key = %+v, want key_valid", x.Key)
				}
			} else if x.Key != nil {
				t.Errorf("failed authentication set key %+v", x.Key)
			}
		})
	}
	for _, e := range []*core.APIError{core.ErrMissingKey, core.ErrMalformedKey, core.ErrInvalidKey} {
		if e.Status != http.StatusUnauthorized || e.Code != "invalid_api_key" || e.Message == "" {
			t.Errorf("auth error %+v: want 401 invalid_api_key with a message", e)
		}
	}
}

// TestAuthenticateStoreKeys runs real store keys through Compile: created keys work, revoked and
// rotated-away secrets do not.
func TestAuthenticateStoreKeys(t *testing.T) {
	s, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, a := range []string{"a", "b"} {
		if _, err := s.CreateAccount(a, decimal.Zero); err != nil {
			t.Fatal(err)
		}
	}
	live, liveSecret, err := s.CreateKey("a", store.KeyOptions{Name: "live"})
	if err != nil {
		t.Fatal(err)
	}
	gone, goneSecret, err := s.CreateKey("a", store.KeyOptions{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeKey(gone.ID); err != nil {
		t.Fatal(err)
	}
	rot, oldSecret, err := s.CreateKey("b", store.KeyOptions{Name: "rot"})
	if err != nil {
		t.Fatal(err)
	}
	_, newSecret, err := s.RotateKey(rot.ID)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := s.Keys()
	if err != nil {
		t.Fatal(err)
	}
	rt := core.Compile(testGateway(), keys)
	for _, tt := range []struct {
		secret string
		id     string // "" = rejected
	}{
		{liveSecret, live.ID},
		{goneSecret, ""},
		{oldSecret, ""},
		{newSecret, rot.ID},
	} {
		x := NewServer(nil, rt, nil).newExchange(rt)
		e := x.Authenticate("Bearer " + tt.secret)
		switch {
		case tt.id == "" && e != core.ErrInvalidKey:
			t.Errorf("secret %s...: got %v, want errInvalidKey", tt.secret[:10], e)
		case tt.id != "" && (e != nil || x.Key.ID != tt.id):
			t.Errorf("secret %s...: got %v, want key %s", tt.secret[:10], e, tt.id)
		}
	}
}

// envoy plays Envoy's side of the ext_proc protocol over a real gRPC connection.
type envoy struct {
	t      *testing.T
	srv    *Server
	client extprocv3.ExternalProcessorClient
}

func startServer(t *testing.T, rt *core.Runtime) *envoy { return startServerWith(t, rt, nil) }

func startServerWith(t *testing.T, rt *core.Runtime, b *Billing) *envoy {
	t.Helper()
	return startServerLogging(t, rt, b, io.Discard)
}

// startServerLogging is startServerWith with the server's log written to log.
func startServerLogging(t *testing.T, rt *core.Runtime, b *Billing, log io.Writer) *envoy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv := NewServer(slog.New(slog.NewTextHandler(log, nil)), rt, b)
	extprocv3.RegisterExternalProcessorServer(gs, srv)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		if err := <-done; err != nil {
			t.Errorf("grpc Serve: %v", err)
		}
	})
	return &envoy{t: t, srv: srv, client: extprocv3.NewExternalProcessorClient(conn)}
}

type stream struct {
	t *testing.T
	s extprocv3.ExternalProcessor_ProcessClient
}

// open starts a router-level stream in the buffered protocol (translator.MeshExtProc): one
// reply per message, so a test reads the exchange's answer to each. Tollway's own Envoys speak
// the pipelined protocol (pipeline_test.go), which delivers the same answers regrouped.
func (e *envoy) open() *stream {
	e.t.Helper()
	return e.openPhase("")
}

// openPhase starts a stream with the phase metadata ("": an Istio sidecar's filter, MeshExtProc).
func (e *envoy) openPhase(phase string) *stream {
	e.t.Helper()
	if phase == "" {
		return e.openWith()
	}
	return e.openWith(ir.PhaseMetadata, phase)
}

// openWith starts a stream with the gRPC initial metadata kv (key, value pairs), as a filter's
// grpc_service.initial_metadata sends it.
func (e *envoy) openWith(kv ...string) *stream {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	e.t.Cleanup(cancel)
	if len(kv) > 0 {
		ctx = grpcmd.AppendToOutgoingContext(ctx, kv...)
	}
	s, err := e.client.Process(ctx)
	if err != nil {
		e.t.Fatalf("Process: %v", err)
	}
	return &stream{t: e.t, s: s}
}

func (s *stream) roundTrip(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	s.t.Helper()
	if err := s.s.Send(req); err != nil {
		s.t.Fatalf("Send: %v", err)
	}
	resp, err := s.s.Recv()
	if err != nil {
		s.t.Fatalf("Recv: %v", err)
	}
	return resp
}

// expectClosed checks the server ended the stream after an immediate response.
func (s *stream) expectClosed() {
	s.t.Helper()
	if resp, err := s.s.Recv(); !errors.Is(err, io.EOF) {
		s.t.Errorf("after an immediate response Recv = %v, %v; want io.EOF", resp, err)
	}
}

func (s *stream) close() {
	s.t.Helper()
	if err := s.s.CloseSend(); err != nil {
		s.t.Fatalf("CloseSend: %v", err)
	}
	if _, err := s.s.Recv(); !errors.Is(err, io.EOF) {
		s.t.Errorf("after CloseSend Recv err = %v, want io.EOF", err)
	}
}

// TestMeshFilterRewritesNothing: in an Envoy whose routes are not Tollway's (the Istio shape,
// translator.MeshExtProc, no phase metadata), a request of one attempt on an OpenAI-shaped
// provider is not rewritten: the mesh routes it as the client sent it, and the provider's
// credential never goes where the mesh sends it.
func TestMeshFilterRewritesNothing(t *testing.T) {
	e := startServer(t, testRuntime())
	for _, phase := range []string{"", ir.PhaseRouter} {
		s := e.openPhase(phase)
		body := requestBody(`{"model":"free","messages":[{"role":"user","content":"hi"}]}`)
		var hm *extprocv3.HeaderMutation
		var bm *extprocv3.BodyMutation
		if phase == "" {
			s.roundTrip(chatHeaders("Bearer "+validSecret, "req-mesh", false))
			rb := s.roundTrip(body).GetRequestBody().GetResponse()
			hm, bm = rb.GetHeaderMutation(), rb.GetBodyMutation()
		} else { // pipelined: the headers' reply carries the routing, the chunk's the body
			out := s.pipelined(2, withLength(chatHeaders("Bearer "+validSecret, "req-mesh", false), len(body.GetRequestBody().GetBody())), body)
			hm, bm = out[0].GetRequestHeaders().GetResponse().GetHeaderMutation(), out[1].GetRequestBody().GetResponse().GetBodyMutation()
		}
		set := setHeaders(t, hm)
		rewritten := bm != nil || set[":authority"] != "" || set[":path"] != ""
		if phase == "" && (rewritten || set[ir.ClusterHeader] != "chain.model.free") {
			t.Errorf("mesh filter: body rewritten %v, headers %v; want the request as sent, cluster chain.model.free", bm != nil, set)
		}
		if phase == ir.PhaseRouter && (!rewritten || set[ir.ClusterHeader] != "provider.local") {
			t.Errorf("Tollway's own filter: rewritten %v, cluster %q; want the direct rewrite to provider.local", rewritten, set[ir.ClusterHeader])
		}
	}
}

// playAttempt plays one attempt's upstream ext_proc stream on provider's endpoint of the chain of
// catalog model chain, and hands its rewrite (the request body's answer) to check.
func playAttempt(t *testing.T, e *envoy, raw bool, requestID, provider, chain, body string, check func(*extprocv3.CommonResponse)) {
	t.Helper()
	a := e.openAttempt(provider, chain)
	h := chatHeaders("Bearer "+validSecret, requestID, raw)
	hs := h.GetRequestHeaders().GetHeaders()
	hs.Headers = append(hs.Headers, hdr("x-envoy-expected-rq-timeout-ms", "60000", raw), hdr("x-envoy-internal", "true", raw), hdr(ir.ModelHeader, "gpt", raw))
	resp := a.roundTrip(h)
	if resp.GetRequestHeaders() == nil {
		t.Fatalf("attempt headers answered with %v", resp)
	}
	// An OpenAI-shaped answer needs nothing from the attempt filter: a 401 arrives through the
	// router's refusal log, so the response headers are skipped.
	if m := resp.GetModeOverride(); m.GetResponseHeaderMode() != extprocv3filter.ProcessingMode_SKIP || m.GetRequestBodyMode() != extprocv3filter.ProcessingMode_BUFFERED {
		t.Errorf("an OpenAI attempt must skip response headers and keep the buffered body: %v", m)
	}
	if rm := resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !contains(rm, "x-envoy-expected-rq-timeout-ms") || !contains(rm, "x-envoy-internal") || !contains(rm, ir.ModelHeader) {
		t.Errorf("attempt removes %v; no x-envoy-* or x-tollway-* header may reach a provider", rm)
	}
	resp = a.roundTrip(requestBody(body))
	check(resp.GetRequestBody().GetResponse())
	a.close()
}

// TestProcessChatFlow plays both filters Envoy runs: the router-level ext_proc picks the chain
// and leaves the body alone; the upstream ext_proc of an attempt rewrites it for the endpoint's
// provider and reports which attempt answered; the router-level one shapes errors.
func TestProcessChatFlow(t *testing.T) {
	e := startServer(t, testRuntime())
	tests := []struct {
		name       string
		raw        bool
		body       string
		cluster    string
		attempts   string
		provider   string // the endpoint the attempt goes to
		model      string // upstream model name
		auth       string // "" = removed
		path       string
		authority  string
		removed    string // x-tollway-removed-params on the response, "" = absent
		direct     bool   // one attempt on an OpenAI-shaped provider: rewritten by the router-level filter
		errStatus  string
		errBody    string
		wantCode   string
		wantErrMsg string
	}{
		{
			name: "raw values, provider with key", raw: true,
			body:    `{"model":"gpt","messages":[{"role":"user","content":"hi"}],"top_k":3,"seed":1,"temperature":0.5}`,
			cluster: "chain.model.gpt", attempts: "1", provider: "openai", model: "gpt-4o-2024-08-06", auth: "Bearer sk-openai-secret",
			path: "/v1/chat/completions", authority: "api.openai.com", removed: "seed,top_k",
			errStatus: "429", errBody: `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`,
			wantCode: "rate_limit_exceeded", wantErrMsg: "slow down",
		},
		{
			name: "string values, keyless provider", raw: false,
			body:    `{"model":"free","messages":[{"role":"user","content":"hi"}],"top_k":3}`,
			cluster: "chain.model.free", attempts: "0", provider: "local", model: "qwen2.5:7b", auth: "",
			path: "/v1/chat/completions", authority: "127.0.0.1:11434",
			errStatus: "500", errBody: "Internal Server Error",
			wantCode: "upstream_error", wantErrMsg: "provider local answered HTTP 500: Internal Server Error",
		},
		{
			name: "keyless provider left out of the chain", raw: true,
			body:    `{"model":"fallback","messages":[{"role":"user","content":"hi"}]}`,
			cluster: "chain.model.fallback", attempts: "0", provider: "groq", model: "llama-3.3-70b", auth: "Bearer gsk-groq-secret",
			path: "/openai/v1/chat/completions", authority: "api.groq.com",
			errStatus: "503", errBody: `{"error":"overloaded"}`,
			wantCode: "upstream_error", wantErrMsg: "overloaded",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requestID := "req-" + strings.ReplaceAll(tt.name, " ", "-")
			run := func(status string) (*extprocv3.ProcessingResponse, *stream) {
				s := e.open()
				h := chatHeaders("Bearer "+validSecret, requestID, tt.raw)
				hs := h.GetRequestHeaders().GetHeaders()
				for _, k := range []string{"x-tollway-phase", "x-tollway-provider", "x-envoy-original-path", "x-envoy-max-retries", "x-envoy-upstream-rq-timeout-ms", "x-envoy-internal", "openai-organization", "cookie", "x-forwarded-proto"} {
					hs.Headers = append(hs.Headers, hdr(k, "1", tt.raw))
				}
				resp := s.roundTrip(h)
				rh := resp.GetRequestHeaders()
				if rh == nil {
					t.Fatalf("request headers answered with %T, want RequestHeaders: %v", resp.Response, resp)
				}
				rm := rh.GetResponse().GetHeaderMutation().GetRemoveHeaders()
				for _, k := range []string{ir.ClusterHeader, ir.ModelHeader, "x-tollway-phase", "x-tollway-provider", "x-envoy-original-path", "x-envoy-max-retries", "x-envoy-upstream-rq-timeout-ms"} {
					if !contains(rm, k) {
						t.Errorf("request headers remove %v; the client's %s must be removed", rm, k)
					}
				}
				if contains(rm, "x-envoy-internal") {
					t.Error("x-envoy-internal is Envoy's own edge decision, not removed here")
				}

				resp = s.roundTrip(requestBody(tt.body))
				rb := resp.GetRequestBody().GetResponse()
				if rb == nil {
					t.Fatalf("request body answered with %T, want RequestBody: %v", resp.Response, resp)
				}
				if !rb.GetClearRouteCache() {
					t.Error("ClearRouteCache = false; the route must be recomputed after the cluster header is set")
				}
				set := setHeaders(t, rb.GetHeaderMutation())
				if set[ir.ClusterHeader] != tt.cluster || set["x-envoy-max-retries"] != tt.attempts {
					t.Errorf("cluster %q retries %q, want %q %q", set[ir.ClusterHeader], set["x-envoy-max-retries"], tt.cluster, tt.attempts)
				}
				// The provider's request, from whichever filter rewrote it.
				checkRewrite := func(ab *extprocv3.CommonResponse, direct bool) {
					body := ab.GetBodyMutation().GetBody()
					up := decodeObject(t, body)
					if got := jsonString(t, up["model"]); got != tt.model {
						t.Errorf("upstream model = %q, want %q", got, tt.model)
					}
					if _, ok := up["top_k"]; ok && tt.removed != "" {
						t.Errorf("unsupported top_k forwarded: %s", body)
					}
					aset := setHeaders(t, ab.GetHeaderMutation())
					if aset[":path"] != tt.path || aset[":authority"] != tt.authority || aset["content-length"] != strconv.Itoa(len(body)) {
						t.Errorf(":path %q :authority %q content-length %q (body %d)", aset[":path"], aset[":authority"], aset["content-length"], len(body))
					}
					removed := ab.GetHeaderMutation().GetRemoveHeaders()
					if tt.auth == "" {
						if _, ok := aset["authorization"]; ok || !contains(removed, "authorization") {
							t.Errorf("keyless provider: authorization set=%q removed=%v; the client's key must be removed", aset["authorization"], removed)
						}
					} else if aset["authorization"] != tt.auth || contains(removed, "authorization") {
						t.Errorf("authorization = %q (removed %v), want %q", aset["authorization"], removed, tt.auth)
					}
					for k, v := range aset {
						if strings.Contains(v, validSecret) {
							t.Errorf("client API key forwarded upstream in %s", k)
						}
					}
					if direct && (!contains(removed, "openai-organization") || !contains(removed, "cookie")) {
						t.Errorf("removed %v: a client's openai-organization and cookie must not reach the provider", removed)
					}
					if direct && contains(removed, "x-forwarded-proto") {
						t.Errorf("removed %v: without x-forwarded-proto Envoy matches no route (the route removes it)", removed)
					}
				}
				served := tt.provider + "/" + strings.TrimPrefix(tt.cluster, "chain.model.")
				if tt.direct {
					checkRewrite(rb, true)
					served = tt.provider + "/" // a provider's own cluster has no model in its metadata
				} else {
					if rb.GetBodyMutation() != nil {
						t.Error("the router-level filter rewrote the body; attempts rewrite it")
					}
					playAttempt(t, e, tt.raw, requestID, tt.provider, strings.TrimPrefix(tt.cluster, "chain.model."), tt.body, func(ab *extprocv3.CommonResponse) { checkRewrite(ab, false) })
				}

				// Back at the router-level filter, which learns who answered from the header the
				// route adds from the endpoint's metadata.
				resp = s.roundTrip(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
					ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
						hdr(":status", status, tt.raw), hdr("content-type", "application/json", tt.raw),
						hdr(ir.ServedHeader, served, tt.raw),
					}}},
				}})
				rsh := resp.GetResponseHeaders()
				if rsh == nil {
					t.Fatalf("response headers answered with %T", resp.Response)
				}
				rset := setHeaders(t, rsh.GetResponse().GetHeaderMutation())
				if rset[ir.ProviderHeader] != tt.provider {
					t.Errorf("response %s = %q, want %q", ir.ProviderHeader, rset[ir.ProviderHeader], tt.provider)
				}
				if got := rset["x-tollway-removed-params"]; got != tt.removed {
					t.Errorf("x-tollway-removed-params = %q, want %q", got, tt.removed)
				}
				if got := rset[chat.UpstreamModelHeader]; got != tt.model {
					t.Errorf("%s = %q, want the provider's model name %q", chat.UpstreamModelHeader, got, tt.model)
				}
				return resp, s
			}

			t.Run("success names the catalog model", func(t *testing.T) {
				resp, s := run("200")
				if got := resp.GetModeOverride().GetResponseBodyMode(); got != extprocv3filter.ProcessingMode_BUFFERED {
					t.Fatalf("200 JSON response body mode = %v, want BUFFERED (billing off too: the model field is rewritten)", got)
				}
				resp = s.roundTrip(responseBody(`{"id":"c1","object":"chat.completion","model":"` + tt.model + `","choices":[]}`))
				rb := resp.GetResponseBody().GetResponse()
				body := rb.GetBodyMutation().GetBody()
				catalogID := jsonString(t, decodeObject(t, []byte(tt.body))["model"])
				if want := `{"id":"c1","object":"chat.completion","model":"` + catalogID + `","choices":[]}`; string(body) != want {
					t.Errorf("answer %s, want %s", body, want)
				}
				if set := setHeaders(t, rb.GetHeaderMutation()); set["content-length"] != strconv.Itoa(len(body)) {
					t.Errorf("content-length %q for %d bytes", set["content-length"], len(body))
				}
				s.close()
			})
			t.Run("error is reshaped", func(t *testing.T) {
				resp, s := run(tt.errStatus)
				if got := resp.GetModeOverride().GetResponseBodyMode(); got != extprocv3filter.ProcessingMode_BUFFERED {
					t.Fatalf("%s response body mode = %v, want BUFFERED", tt.errStatus, got)
				}
				resp = s.roundTrip(responseBody(tt.errBody))
				rb := resp.GetResponseBody().GetResponse()
				if rb == nil {
					t.Fatalf("response body answered with %T", resp.Response)
				}
				body := rb.GetBodyMutation().GetBody()
				var got struct {
					Error map[string]json.RawMessage `json:"error"`
				}
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatalf("rewritten error body %s: %v", body, err)
				}
				if len(got.Error) != 3 {
					t.Errorf("error object %s: want exactly message, code, request_id", body)
				}
				if m := jsonString(t, got.Error["message"]); m != tt.wantErrMsg {
					t.Errorf("message = %q, want %q", m, tt.wantErrMsg)
				}
				if c := jsonString(t, got.Error["code"]); c != tt.wantCode {
					t.Errorf("code = %q, want %q", c, tt.wantCode)
				}
				if id := jsonString(t, got.Error["request_id"]); id != requestID {
					t.Errorf("request_id = %q, want the x-request-id %q", id, requestID)
				}
				set := setHeaders(t, rb.GetHeaderMutation())
				if set["content-length"] != strconv.Itoa(len(body)) || set["content-type"] != "application/json" {
					t.Errorf("error body headers = %v, body %d bytes", set, len(body))
				}
				s.close()
			})
		})
	}
}

// openAttempt opens an upstream-filter stream for an endpoint of provider serving model, with
// the endpoint metadata as Envoy 1.40 sends it (protobuf text).
func (e *envoy) openAttempt(providerName, model string) *attemptStream {
	e.t.Helper()
	s := e.openWith(ir.PhaseMetadata, ir.PhaseUpstream)
	md := fmt.Sprintf(`filter_metadata { key: "tollway" value { fields { key: "provider" value { string_value: %q } } fields { key: "model" value { string_value: %q } } } }`, providerName, model)
	return &attemptStream{stream: *s, attrs: map[string]*structpb.Struct{
		"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{"xds.upstream_host_metadata": structpb.NewStringValue(md)}},
	}}
}

type attemptStream struct {
	stream
	attrs map[string]*structpb.Struct
}

// roundTrip sends the endpoint attributes with the request headers, as Envoy does.
func (a *attemptStream) roundTrip(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	if _, ok := req.Request.(*extprocv3.ProcessingRequest_RequestHeaders); ok {
		req.Attributes = a.attrs
	}
	return a.stream.roundTrip(req)
}

func TestProcessImmediateResponses(t *testing.T) {
	e := startServer(t, testRuntime())
	good := "Bearer " + validSecret
	tests := []struct {
		name   string
		send   []*extprocv3.ProcessingRequest
		status int
		code   string
	}{
		{"missing key", []*extprocv3.ProcessingRequest{chatHeaders("", "rid-1", true)}, 401, "invalid_api_key"},
		{"unknown key", []*extprocv3.ProcessingRequest{chatHeaders("Bearer "+unknownSecret, "rid-2", true)}, 401, "invalid_api_key"},
		{"revoked key", []*extprocv3.ProcessingRequest{chatHeaders("Bearer "+revokedSecret, "rid-3", false)}, 401, "invalid_api_key"},
		{"malformed key", []*extprocv3.ProcessingRequest{chatHeaders("Bearer ale-x", "rid-4", true)}, 401, "invalid_api_key"},
		{"other path", []*extprocv3.ProcessingRequest{requestHeaders(false,
			hdr(":method", "GET", true), hdr(":path", "/v1/other", true), hdr("authorization", good, true), hdr("x-request-id", "rid-5", true))}, 404, "not_found"},
		{"models not served here", []*extprocv3.ProcessingRequest{requestHeaders(false,
			hdr(":method", "POST", false), hdr(":path", "/v1/chat/completions/extra", false), hdr("x-request-id", "rid-6", false))}, 404, "not_found"},
		{"wrong method", []*extprocv3.ProcessingRequest{requestHeaders(false,
			hdr(":method", "GET", true), hdr(":path", "/v1/chat/completions", true), hdr("authorization", good, true), hdr("x-request-id", "rid-7", true))}, 405, "method_not_allowed"},
		{"no body", []*extprocv3.ProcessingRequest{requestHeaders(true,
			hdr(":method", "POST", true), hdr(":path", "/v1/chat/completions?x=1", true), hdr("authorization", good, true), hdr("x-request-id", "rid-8", true))}, 400, "invalid_request"},
		{"bad body", []*extprocv3.ProcessingRequest{chatHeaders(good, "rid-9", true), requestBody(`{"model":"nope","messages":[{"role":"user","content":"x"}]}`)}, 400, "model_not_found"},
		{"unavailable model", []*extprocv3.ProcessingRequest{chatHeaders(good, "rid-10", true), requestBody(`{"model":"broken","messages":[{"role":"user","content":"x"}]}`)}, 503, "model_unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := e.open()
			var resp *extprocv3.ProcessingResponse
			for i, req := range tt.send {
				resp = s.roundTrip(req)
				if i < len(tt.send)-1 && resp.GetImmediateResponse() != nil {
					t.Fatalf("message %d answered immediately: %v", i, resp)
				}
			}
			imm := resp.GetImmediateResponse()
			if imm == nil {
				t.Fatalf("answered with %T, want ImmediateResponse", resp.Response)
			}
			if int(imm.GetStatus().GetCode()) != tt.status {
				t.Errorf("status = %d, want %d", imm.GetStatus().GetCode(), tt.status)
			}
			if want := ir.ErrorCodeDetailsPrefix + tt.code; imm.GetDetails() != want || !strings.HasPrefix(imm.GetDetails(), "tollway_") {
				t.Errorf("details = %q, want %q", imm.GetDetails(), want)
			}
			var requestID string
			for _, h := range tt.send[0].GetRequestHeaders().GetHeaders().GetHeaders() {
				if h.Key == "x-request-id" {
					requestID = core.HeaderValue(h)
				}
			}
			set := setHeaders(t, imm.GetHeaders())
			if set["x-request-id"] != requestID || set["content-type"] != "application/json" {
				t.Errorf("immediate response headers = %v, want x-request-id %q and JSON", set, requestID)
			}
			var body struct {
				Error struct {
					Message   string `json:"message"`
					Code      string `json:"code"`
					RequestID string `json:"request_id"`
				} `json:"error"`
			}
			if err := json.Unmarshal(imm.GetBody(), &body); err != nil {
				t.Fatalf("body %s: %v", imm.GetBody(), err)
			}
			if body.Error.Code != tt.code || body.Error.Message == "" || body.Error.RequestID != requestID {
				t.Errorf("body = %s, want code %s, a message and request_id %q", imm.GetBody(), tt.code, requestID)
			}
			s.expectClosed()
		})
	}
}

func TestProcessSwap(t *testing.T) {
	e := startServer(t, testRuntime())
	auth := "Bearer " + validSecret

	// A stream opened before the swap keeps the runtime it started with.
	before := e.open()
	if resp := before.roundTrip(chatHeaders(auth, "r1", true)); resp.GetRequestHeaders() == nil {
		t.Fatalf("valid key rejected before swap: %v", resp)
	}

	e.srv.Swap(core.Compile(testGateway(), []store.Key{keyRecord("key_other", unknownSecret, false)}))

	if resp := before.roundTrip(requestBody(`{"model":"gpt","messages":[{"role":"user","content":"x"}]}`)); resp.GetRequestBody() == nil {
		t.Errorf("in-flight stream broken by swap: %v", resp)
	}
	before.close()

	s := e.open()
	resp := s.roundTrip(chatHeaders(auth, "r2", true))
	if got := resp.GetImmediateResponse().GetStatus().GetCode(); got != http.StatusUnauthorized {
		t.Fatalf("after swap removing the key: status %d (%T), want 401", got, resp.Response)
	}
	s.expectClosed()

	s = e.open()
	if resp := s.roundTrip(chatHeaders("Bearer "+unknownSecret, "r3", false)); resp.GetRequestHeaders() == nil {
		t.Fatalf("key added by the swap rejected: %v", resp)
	}
	s.close()
}
