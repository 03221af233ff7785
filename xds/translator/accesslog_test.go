package translator

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollway/tollway/xds/ir"
)

// TestUnbilledLinesSkippedOnlyWithBilling: on a split gateway with billing on, Envoy skips a
// routed request's line that has no bill (Tollway writes it with the bill, from the answer
// log); with billing off no line has a bill, and Envoy writes every line but a fast-lane
// stream's, so Tollway writes none of them (and no request has two).
func TestUnbilledLinesSkippedOnlyWithBilling(t *testing.T) {
	for _, bills := range []bool{true, false} {
		logs, err := accessLogs(ir.AccessLog{Bills: bills}, true)
		if err != nil || len(logs) != 1 {
			t.Fatalf("accessLogs: %v %v", logs, err)
		}
		filter := protojson.Format(logs[0].GetFilter())
		if got := strings.Contains(filter, `"`+ir.CostKey+`"`); got != bills {
			t.Errorf("billing %v: the filter skips lines without a bill: %v, want %v\n%s", bills, got, bills, filter)
		}
		if !strings.Contains(filter, `"lane"`) && !strings.Contains(filter, ir.LaneMetadata) {
			t.Errorf("billing %v: the filter no longer skips fast-lane streams' lines\n%s", bills, filter)
		}
	}
}
