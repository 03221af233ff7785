package core

import (
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Processor handles the messages of one HTTP request (or one upstream attempt) of one kind. Each
// method answers its message with one reply; an error ends the stream (Envoy then fails the
// request closed). Done is called once when the stream ends, however it ends.
type Processor interface {
	RequestHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error)
	RequestBody(*extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error)
	ResponseHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error)
	ResponseBody(*extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error)
	Done()
}

// AnsweredEarly is the rest of a processor whose request ext_proc answers itself, at its
// headers or its body: the immediate response ends the stream, so no later message comes.
type AnsweredEarly struct{}

// ErrAnsweredEarly ends a stream whose Envoy sent a message after its immediate response.
var ErrAnsweredEarly = status.Error(codes.FailedPrecondition, "extproc: a message came after the request was answered")

func (AnsweredEarly) RequestBody(*extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return nil, ErrAnsweredEarly
}

func (AnsweredEarly) ResponseHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	return nil, ErrAnsweredEarly
}

func (AnsweredEarly) ResponseBody(*extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return nil, ErrAnsweredEarly
}

func (AnsweredEarly) Done() {}
