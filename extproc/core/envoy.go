package core

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// AddHeaders sets hs on a header mutation, in a stable order.
func AddHeaders(m *extprocv3.HeaderMutation, hs map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(hs)) {
		m.SetHeaders = append(m.SetHeaders, SetHeader(k, hs[k]))
	}
}

// Immediate answers the client directly with a JSON body.
func Immediate(requestID string, status int, body []byte, details string) *extprocv3.ProcessingResponse {
	set := []*corev3.HeaderValueOption{SetHeader("content-type", "application/json")}
	if requestID != "" {
		set = append(set, SetHeader("x-request-id", requestID))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: set},
			Body:    body,
			Details: details,
		},
	}}
}

func SetHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

func HeaderValue(h *corev3.HeaderValue) string {
	if h.Value != "" {
		return h.Value
	}
	return string(h.RawValue)
}

// MetadataMemo remembers the endpoint metadata parsed from its text, for one runtime (one
// configuration, so a bounded set of endpoints). The maps it returns are shared: read only.
type MetadataMemo struct {
	m sync.Map // text -> map[string]string
	n atomic.Int32
}

// MaxMemoized bounds the memo should endpoints' text vary (it never should).
const MaxMemoized = 4096

func (m *MetadataMemo) Get(txt string) (map[string]string, bool) {
	if m == nil {
		return nil, false
	}
	v, ok := m.m.Load(txt)
	if !ok {
		return nil, false
	}
	return v.(map[string]string), true
}

func (m *MetadataMemo) Put(txt string, md map[string]string) {
	if m == nil || md == nil || m.n.Load() >= MaxMemoized {
		return
	}
	if _, loaded := m.m.LoadOrStore(txt, md); !loaded {
		m.n.Add(1)
	}
}

// Len is how many texts are remembered.
func (m *MetadataMemo) Len() int { return int(m.n.Load()) }

// AddMetadata adds fields to the dynamic metadata namespace ns that resp sets (merged with
// what it sets already).
func AddMetadata(resp *extprocv3.ProcessingResponse, ns string, fields map[string]*structpb.Value) {
	if resp.DynamicMetadata == nil {
		resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	if resp.DynamicMetadata.Fields == nil {
		resp.DynamicMetadata.Fields = map[string]*structpb.Value{}
	}
	cur := resp.DynamicMetadata.Fields[ns].GetStructValue()
	if cur == nil {
		cur = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		resp.DynamicMetadata.Fields[ns] = structpb.NewStructValue(cur)
	}
	maps.Copy(cur.Fields, fields)
}
