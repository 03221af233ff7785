package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/provider/internal/providertest"
)

// TestClippedValuesStayUTF8: a client's value quoted in a refusal is cut at a character
// boundary (docs/api.md#errors: messages are JSON in UTF-8), never inside a character.
func TestClippedValuesStayUTF8(t *testing.T) {
	long := "a" + strings.Repeat("é", 100) // two bytes a character: an even cut splits one
	args, _ := json.Marshal(long)
	_, err := (toAnthropic{}).Chat(testProvider("anthropic"), nil, "m", taskReq(t,
		`{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":`+string(args)+`}}]}]}`))
	providertest.ClipsWhole(t, err, long)
}
