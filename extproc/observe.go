package extproc

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollway/tollway/xds/ir"
)

// Metering runs off the request's path. The router-level filter takes the hold and hands the
// bill over under a meter id it puts in a request header; a second ext_proc filter in
// observability mode (Envoy sends, never waits) claims it and reads the answer as it streams
// by. So no chunk of an answer waits on ext_proc for billing's sake.

// claimGrace is how long a handed-off bill may stay unclaimed after its request ended before it
// is released: the metering stream claims it before the request goes upstream, so only a
// metering stream that never started leaves one behind.
var claimGrace = 10 * time.Second

// maxMeteredJSON bounds how much of a plain JSON answer is kept to read its usage.
const maxMeteredJSON = 4 << 20

// meters holds bills between the hand-off and the claim.
type meters struct {
	next  atomic.Uint64
	bills sync.Map // meter id -> *bill
}

// handOff parks bl for the metering stream and returns the id the request carries to it.
func (s *Server) handOff(bl *bill) string {
	id := strconv.FormatUint(s.meters.next.Add(1), 36)
	s.meters.bills.Store(id, bl)
	return id
}

// claim takes the bill parked under id, once.
func (s *Server) claim(id string) *bill {
	if v, ok := s.meters.bills.LoadAndDelete(id); ok {
		return v.(*bill)
	}
	return nil
}

// unclaimed runs when a request's router-level stream ends: a bill nobody claimed by then is
// given the grace period, then released (and logged: that request goes unbilled).
func (s *Server) unclaimed(id string) {
	if id == "" {
		return
	}
	if _, ok := s.meters.bills.Load(id); !ok {
		return
	}
	time.AfterFunc(claimGrace, func() {
		if bl := s.claim(id); bl != nil {
			s.log.Error("metering stream never claimed a request's bill; hold released, request not billed",
				"request_id", bl.requestID, "key", bl.key.ID)
			bl.release()
		}
	})
}

// processMeter serves the observing filter's stream for one request. Envoy expects no answers.
func (s *Server) processMeter(stream extprocv3.ExternalProcessor_ProcessServer) error {
	rt := s.runtime.Load()
	var (
		bl    *bill
		sse   bool
		plain bytes.Buffer
	)
	defer func() {
		if bl != nil {
			if !sse && plain.Len() > 0 {
				bl.meter.body(plain.Bytes())
			}
			bl.finish()
		}
	}()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			for _, hv := range r.RequestHeaders.GetHeaders().GetHeaders() {
				if hv.Key == ir.MeterHeader {
					bl = s.claim(headerValue(hv))
				}
			}
			if bl == nil {
				return nil // nothing to meter (billing off, or not a chat request): close early
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			if bl == nil {
				return nil
			}
			bl.responded = true
			for _, hv := range r.ResponseHeaders.GetHeaders().GetHeaders() {
				switch hv.Key {
				case ":status":
					bl.status, _ = strconv.Atoi(headerValue(hv))
				case ir.ServedHeader:
					bl.served(rt, headerValue(hv))
				case "content-type":
					sse = strings.HasPrefix(headerValue(hv), "text/event-stream")
				}
			}
			if bl.status >= 400 {
				return nil // errors are not billed: the deferred finish releases the hold
			}
		case *extprocv3.ProcessingRequest_ResponseBody:
			if bl == nil {
				return nil
			}
			b := r.ResponseBody
			if sse {
				bl.meter.scan(b.GetBody())
			} else if plain.Len()+len(b.GetBody()) <= maxMeteredJSON {
				plain.Write(b.GetBody())
			}
			if b.GetEndOfStream() {
				return nil // the deferred finish settles: nothing more is needed from Envoy
			}
		}
	}
}
