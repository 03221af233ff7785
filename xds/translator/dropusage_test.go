package translator

import (
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// luaHarness stands in for Envoy's Lua stream handle: run(pieces, marked) plays the pieces as
// body chunks (an empty last piece is Envoy's end of stream) and returns what left the filter.
const luaHarness = `
function run(pieces, marked)
  local out, hdrs = {}, {}
  if marked then hdrs["x-tollway-drop-usage"] = "1" end
  local h = {}
  function h:headers()
    return {get = function(_, k) return hdrs[k] end, remove = function(_, k) hdrs[k] = nil end}
  end
  function h:bodyChunks()
    local i, cur = 0, nil
    return function()
      if cur then out[#out + 1] = cur.data end
      i = i + 1
      if i > #pieces then return nil end
      cur = {data = pieces[i]}
      function cur:length() return #self.data end
      function cur:getBytes(s, n) return string.sub(self.data, s + 1, s + n) end
      function cur:setBytes(b) self.data = b end
      return cur
    end
  end
  envoy_on_response(h)
  if #out == 0 then out = pieces end -- not iterated: Envoy passes the body untouched
  return table.concat(out), hdrs["x-tollway-drop-usage"] == nil
end
`

// runDropUsage feeds stream through the filter in pieces of n bytes.
func runDropUsage(t *testing.T, stream string, n int, marked bool) string {
	t.Helper()
	L := lua.NewState()
	defer L.Close()
	if err := L.DoString(dropUsageLua + luaHarness); err != nil {
		t.Fatal(err)
	}
	pieces := L.NewTable()
	for i := 0; i < len(stream); i += n {
		pieces.Append(lua.LString(stream[i:min(i+n, len(stream))]))
	}
	pieces.Append(lua.LString("")) // end of stream
	if err := L.CallByParam(lua.P{Fn: L.GetGlobal("run"), NRet: 2, Protect: true}, pieces, lua.LBool(marked)); err != nil {
		t.Fatal(err)
	}
	if L.Get(-1) != lua.LTrue {
		t.Fatal("the mark header reached the client")
	}
	return L.Get(-2).String()
}

func TestDropUsageLua(t *testing.T) {
	content := "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n"
	usage := "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,\"total_tokens\":19}}\n\n"
	done := "data: [DONE]\n\n"
	for _, tc := range []struct {
		name, in, want string
		marked         bool
	}{
		{"usage event removed", content + usage + done, content + done, true},
		{"unmarked answers pass untouched", content + usage + done, content + usage + done, false},
		{"CRLF events and spaced JSON", strings.ReplaceAll(content+`data: {"choices": [ ], "usage": {"prompt_tokens": 1}}`+"\n\n"+done, "\n", "\r\n"),
			strings.ReplaceAll(content+done, "\n", "\r\n"), true},
		{"a final event without its blank line still goes out", content + usage + "data: [DONE]", content + "data: [DONE]", true},
		{"an unfinished JSON event at the end still goes out", content + `data: {"choices":[{"delta":{"content":"x"`, content + `data: {"choices":[{"delta":{"content":"x"`, true},
	} {
		for _, n := range []int{1, 3, 17, 64, len(tc.in)} {
			if got := runDropUsage(t, tc.in, n, tc.marked); got != tc.want {
				t.Errorf("%s, chunks of %d bytes:\n got %q\nwant %q", tc.name, n, got, tc.want)
			}
		}
	}
}
