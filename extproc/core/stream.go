package core

import (
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollway/tollway/xds/ir"
)

// EnvoyStream is what a processor may tell Envoy besides its replies: a longer timeout for the
// message being handled.
type EnvoyStream struct {
	// Send sends Envoy a message before the answer to the one being handled; nil outside a
	// stream (tests).
	Send func(*extprocv3.ProcessingResponse) error
	// msgs counts Envoy's messages; extended is the one whose timeout was extended (Envoy takes
	// one override per message).
	msgs, extended int
	// attrs are the attributes Envoy sent with the message being handled.
	attrs map[string]*structpb.Struct
}

// Received notes one more message from Envoy, with its attributes.
func (e *EnvoyStream) Received(attrs map[string]*structpb.Struct) {
	e.msgs++
	e.attrs = attrs
}

// Attributes are the attributes of the message being handled (none outside a stream).
func (e *EnvoyStream) Attributes() map[string]*structpb.Struct {
	if e == nil {
		return nil
	}
	return e.attrs
}

// ExtendTimeout tells Envoy to wait up to d for the answer to the message being handled.
func (e *EnvoyStream) ExtendTimeout(d time.Duration) error {
	if e == nil || e.Send == nil || e.extended == e.msgs {
		return nil // Envoy takes one override per message
	}
	e.extended = e.msgs
	return e.Send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(min(d, ir.MaxExtProcMessageTimeout))})
}
