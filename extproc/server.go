// Package extproc is Tollway's Envoy external processor: it authenticates API keys, validates
// and rewrites chat requests for the chosen provider, tells Envoy where to route them, and puts
// every error in the spec's shape. It reads configuration from an atomically swapped Runtime.
package extproc

import (
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

const chatPath = "/v1/chat/completions"

// Server implements Envoy's ExternalProcessor service.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	log     *slog.Logger
	runtime atomic.Pointer[Runtime]
}

// NewServer makes a server that serves rt until Swap replaces it.
func NewServer(log *slog.Logger, rt *Runtime) *Server {
	s := &Server{log: log}
	s.runtime.Store(rt)
	return s
}

// Swap installs a new runtime for requests that start from now on.
func (s *Server) Swap(rt *Runtime) { s.runtime.Store(rt) }

// exchange is the state of one HTTP request across its ext_proc messages.
type exchange struct {
	rt        *Runtime
	requestID string
	key       *keyInfo
	plan      *chatPlan
	status    int
}

// Process handles one HTTP request's stream of messages from Envoy.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	x := &exchange{rt: s.runtime.Load()}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		var resp *extprocv3.ProcessingResponse
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp = x.requestHeaders(r.RequestHeaders)
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = x.requestBody(r.RequestBody)
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = x.responseHeaders(r.ResponseHeaders)
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = x.responseBody(r.ResponseBody)
		default:
			return status.Errorf(codes.Unimplemented, "extproc: unexpected message %T", r)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		if _, done := resp.Response.(*extprocv3.ProcessingResponse_ImmediateResponse); done {
			return nil
		}
	}
}

func (x *exchange) requestHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	var method, path, auth string
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.Key {
		case ":method":
			method = headerValue(hv)
		case ":path":
			path = headerValue(hv)
		case "authorization":
			auth = headerValue(hv)
		case "x-request-id":
			x.requestID = headerValue(hv)
		}
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if path != chatPath {
		return x.fail(apiErr(http.StatusNotFound, "not_found",
			"no endpoint %s %s; Tollway serves POST %s", method, path, chatPath))
	}
	if method != http.MethodPost {
		return x.fail(apiErr(http.StatusMethodNotAllowed, "method_not_allowed",
			"%s %s is not supported; use POST", method, path))
	}
	if e := x.authenticate(auth); e != nil {
		return x.fail(e)
	}
	if h.GetEndOfStream() {
		return x.fail(errNoBody)
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			// A client must not choose the provider route itself.
			HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{ir.ProviderHeader}},
		}},
	}}
}

// authenticate checks a Bearer ale- key against the hashed keys of the runtime.
func (x *exchange) authenticate(auth string) *APIError {
	scheme, secret, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return errMissingKey
	}
	secret = strings.TrimSpace(secret)
	if !store.WellFormedKey(secret) {
		return errMalformedKey
	}
	h := store.HashKey(secret)
	k := x.rt.keys[h]
	if k == nil || subtle.ConstantTimeCompare(k.hash[:], h[:]) != 1 {
		return errInvalidKey
	}
	x.key = k
	return nil
}

func (x *exchange) requestBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	plan, e := x.rt.planChat(b.GetBody())
	if e != nil {
		return x.fail(e)
	}
	x.plan = plan
	set := []*corev3.HeaderValueOption{
		setHeader(ir.ProviderHeader, plan.provider.Name),
		setHeader("content-length", strconv.Itoa(len(plan.upstream.Body))),
	}
	var remove []string
	for k, v := range plan.upstream.Headers {
		if v == "" {
			remove = append(remove, k)
		} else {
			set = append(set, setHeader(k, v))
		}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: plan.upstream.Body}},
			// The provider header picks the route, so the route chosen before it was set is void.
			ClearRouteCache: true,
		}},
	}}
}

func (x *exchange) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.Key == ":status" {
			x.status, _ = strconv.Atoi(headerValue(hv))
			break
		}
	}
	common := &extprocv3.CommonResponse{}
	if x.plan != nil {
		set := []*corev3.HeaderValueOption{setHeader("x-tollway-provider", x.plan.provider.Name)}
		if len(x.plan.removed) > 0 {
			set = append(set, setHeader("x-tollway-removed-params", strings.Join(x.plan.removed, ",")))
		}
		common.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: set}
	}
	resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: common},
	}}
	// Successful answers and streams pass through untouched; error bodies are read so they can
	// be put in the spec's shape.
	if x.status >= 400 {
		resp.ModeOverride = &extprocv3filter.ProcessingMode{ResponseBodyMode: extprocv3filter.ProcessingMode_BUFFERED}
	}
	return resp
}

func (x *exchange) responseBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	name := "upstream"
	if x.plan != nil {
		name = x.plan.provider.Name
	}
	body := upstreamError(x.status, name, b.GetBody()).Body(x.requestID)
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setHeader("content-type", "application/json"),
				setHeader("content-length", strconv.Itoa(len(body))),
			}},
			BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		}},
	}}
}

// fail answers the client directly with e in the spec's error shape.
func (x *exchange) fail(e *APIError) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(e.Status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setHeader("content-type", "application/json"),
				setHeader("x-request-id", x.requestID),
			}},
			Body:    e.Body(x.requestID),
			Details: translator.ErrorCodeDetailsPrefix + e.Code,
		},
	}}
}

func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

func headerValue(h *corev3.HeaderValue) string {
	if h.Value != "" {
		return h.Value
	}
	return string(h.RawValue)
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)
