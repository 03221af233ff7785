-- Tollway's stream meter: the per-chunk half of a fast-lane stream (streammeter.go says where it
-- runs and why). ext_proc answers the answer's headers and leaves; this script, in Envoy's
-- worker, rewrites and meters each SSE event of an OpenAI-shaped stream the way
-- extproc/chat/answer.go does, and keeps what it read in dynamic metadata for the access log.
--
-- Input  tollway.lane:  fast (bool), model, drop_usage (bool), request_id.
-- Output tollway.meter: text_bytes (content, reasoning and tool calls' UTF-8 bytes, from the
--   first chunk on, lagging by under LAG_BYTES);
--   finished, done, error, usage, ended, oversized, failed (bools, set when they become true:
--   absent means false); prompt_tokens, completion_tokens, cached_tokens, image_tokens (once
--   usage was seen).
--
-- Envoy's LuaJIT has no JSON library: events are read with plain string.find (memchr speed),
-- which jumps to the few members that matter. A pattern search costs about 10 ns a byte it
-- passes (LuaJIT does not compile patterns), so unanchored patterns are kept off every event's
-- path. Only an error event (rare) is parsed whole.

local find, sub, byte, char, format, lower, concat =
  string.find, string.sub, string.byte, string.char, string.format, string.lower, table.concat

local LANE, METER = "tollway.lane", "tollway.meter"

-- MAX_HELD bounds the incomplete event carried between chunks: an event still incomplete once
-- this much of it came goes through untouched and unread (and tollway.meter says oversized);
-- the events after it are read again.
local MAX_HELD = 1048576

-- LAG_BYTES bounds how far text_bytes in the metadata may lag behind the stream: it is
-- published once this many bytes of text went unpublished (and with every other change). Envoy
-- does not resume the script once the client reset the stream, so only what was published by
-- then reaches the access log. Publishing at every chunk cost 2.7 us of Envoy's CPU more per
-- chunk (two wrappers and a protobuf merge), half the rest of a chunk's work: 64 bytes, about
-- 16 tokens of English, is once every 10-16 chunks (streammeter.go, StreamMeterLagBytes).
local LAG_BYTES = 64

-- Go's encoding/json escapes, so that rewritten bytes equal what extproc writes.
local ESC = {}
for c = 0, 31 do ESC[c] = format("\\u%04x", c) end
ESC[8], ESC[9], ESC[10], ESC[12], ESC[13] = "\\b", "\\t", "\\n", "\\f", "\\r"
ESC[34], ESC[92], ESC[60], ESC[62], ESC[38] = '\\"', "\\\\", "\\u003c", "\\u003e", "\\u0026"

-- utf8_len is the length of the valid UTF-8 sequence at s[i] (i holds a byte >= 0x80), or nil.
local function utf8_len(s, i)
  local c, c1 = byte(s, i), byte(s, i + 1) or 0
  if c >= 0xC2 and c <= 0xDF then
    return (c1 >= 0x80 and c1 <= 0xBF) and 2 or nil
  end
  local lo, hi = 0x80, 0xBF
  if c == 0xE0 or c == 0xF0 then lo = c == 0xE0 and 0xA0 or 0x90 end
  if c == 0xED then hi = 0x9F elseif c == 0xF4 then hi = 0x8F end
  if c1 < lo or c1 > hi then return nil end
  local c2 = byte(s, i + 2) or 0
  if c2 < 0x80 or c2 > 0xBF then return nil end
  if c >= 0xE0 and c <= 0xEF then return 3 end
  local c3 = byte(s, i + 3) or 0
  if c >= 0xF0 and c <= 0xF4 and c3 >= 0x80 and c3 <= 0xBF then return 4 end
  return nil
end

-- json_string encodes s as Go's json.Marshal does: <, > and & escaped, U+2028/U+2029 escaped,
-- invalid UTF-8 as \ufffd.
local function json_string(s)
  local out, n, i, start = {}, 0, 1, 1
  while true do
    local j = find(s, '[%z\1-\31"\\<>&\128-\255]', i)
    if not j then break end
    local c, esc, adv = byte(s, j), nil, 1
    if c < 128 then
      esc = ESC[c]
    else
      local l = utf8_len(s, j)
      if not l then
        esc = "\\ufffd"
      elseif c == 0xE2 and byte(s, j + 1) == 0x80 and (byte(s, j + 2) == 0xA8 or byte(s, j + 2) == 0xA9) then
        esc, adv = byte(s, j + 2) == 0xA8 and "\\u2028" or "\\u2029", 3
      else
        adv = l
      end
    end
    if esc then
      out[n + 1], out[n + 2], n = sub(s, start, j - 1), esc, n + 2
      start = j + adv
    end
    i = j + adv
  end
  out[n + 1] = sub(s, start)
  return '"' .. concat(out) .. '"'
end

-- The error path: a small strict JSON decoder (objects keep their members in order, duplicates
-- included, as Go's decoders see them).
local NULL, TRUE, FALSE, NUMBER, ARRAY = {}, {}, {}, {}, {}
local SIMPLE = { [34] = '"', [92] = "\\", [47] = "/", [98] = "\b", [102] = "\f", [110] = "\n", [114] = "\r", [116] = "\t" }

local function ws(s, i)
  local _, e = find(s, "^[ \t\r\n]*", i)
  return (e or i - 1) + 1
end

local function utf8_char(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + math.floor(cp / 0x40), 0x80 + cp % 0x40) end
  if cp < 0x10000 then
    return char(0xE0 + math.floor(cp / 0x1000), 0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
  end
  return char(0xF0 + math.floor(cp / 0x40000), 0x80 + math.floor(cp / 0x1000) % 0x40,
    0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
end

-- valid_utf8 replaces each invalid byte with U+FFFD, as Go's decoders do.
local function valid_utf8(s)
  if not find(s, "[\128-\255]") then return s end
  local out, n, i, start = {}, 0, 1, 1
  while true do
    local j = find(s, "[\128-\255]", i)
    if not j then break end
    local l = utf8_len(s, j)
    if l then
      i = j + l
    else
      out[n + 1], out[n + 2], n = sub(s, start, j - 1), "\239\191\189", n + 2
      i, start = j + 1, j + 1
    end
  end
  out[n + 1] = sub(s, start)
  return concat(out)
end

local function hex4(s, i)
  local h = sub(s, i, i + 3)
  return find(h, "^%x%x%x%x$") and tonumber(h, 16) or nil
end

local function decode_string(s, i)
  local out, n = {}, 0
  i = i + 1
  while true do
    local j = find(s, '[%z\1-\31"\\]', i)
    if not j then return nil end
    if j > i then n = n + 1; out[n] = valid_utf8(sub(s, i, j - 1)) end
    local c = byte(s, j)
    if c == 34 then return concat(out), j + 1 end
    if c < 32 then return nil end
    local e = byte(s, j + 1)
    if SIMPLE[e] then
      n = n + 1; out[n] = SIMPLE[e]; i = j + 2
    elseif e == 117 then
      local cp = hex4(s, j + 2)
      if not cp then return nil end
      i = j + 6
      if cp >= 0xD800 and cp <= 0xDFFF then
        -- A valid surrogate pair is one character; anything else is U+FFFD (Go's rule).
        local low = cp <= 0xDBFF and sub(s, i, i + 1) == "\\u" and hex4(s, i + 2)
        if low and low >= 0xDC00 and low <= 0xDFFF then
          cp, i = 0x10000 + (cp - 0xD800) * 0x400 + (low - 0xDC00), i + 6
        else
          cp = 0xFFFD
        end
      end
      n = n + 1; out[n] = utf8_char(cp)
    else
      return nil
    end
  end
end

local decode
local function decode_members(s, i, depth, close, obj)
  i = ws(s, i)
  if byte(s, i) == close then return obj or ARRAY, i + 1 end
  while true do
    local k
    if obj then
      if byte(s, i) ~= 34 then return nil end
      k, i = decode_string(s, i)
      if not k then return nil end
      i = ws(s, i)
      if byte(s, i) ~= 58 then return nil end
      i = i + 1
    end
    local v
    v, i = decode(s, i, depth + 1)
    if v == nil then return nil end
    if obj then obj.n = obj.n + 1; obj.keys[obj.n], obj.vals[obj.n] = k, v end
    i = ws(s, i)
    local d = byte(s, i)
    if d == close then return obj or ARRAY, i + 1 end
    if d ~= 44 then return nil end
    i = ws(s, i + 1)
  end
end

-- decode reads the JSON value at s[i]: a string, an object {keys, vals, n}, or a sentinel.
decode = function(s, i, depth)
  if depth > 10000 then return nil end -- Go's nesting limit
  i = ws(s, i)
  local c = byte(s, i)
  if c == 123 then return decode_members(s, i + 1, depth, 125, { keys = {}, vals = {}, n = 0 }) end
  if c == 91 then return decode_members(s, i + 1, depth, 93, nil) end
  if c == 34 then return decode_string(s, i) end
  if sub(s, i, i + 3) == "null" then return NULL, i + 4 end
  if sub(s, i, i + 3) == "true" then return TRUE, i + 4 end
  if sub(s, i, i + 4) == "false" then return FALSE, i + 5 end
  local _, e = find(s, "^-?0", i)
  if not e then _, e = find(s, "^-?[1-9]%d*", i) end
  if not e then return nil end
  local _, f = find(s, "^%.%d+", e + 1)
  e = f or e
  _, f = find(s, "^[eE][+-]?%d+", e + 1)
  return NUMBER, (f or e) + 1
end

-- error_body is core.APIError's Body: {"error": {"message", "code", "request_id"}}, the id
-- left out when empty.
local function error_body(msg, code, request_id)
  local body = '{"error":{"message":' .. json_string(msg) .. ',"code":' .. json_string(code)
  if request_id ~= "" then body = body .. ',"request_id":' .. json_string(request_id) end
  return body .. "}}"
end

-- error_event is answer.go's errorEvent: the spec's error body for an event whose top-level
-- "error" is not null (core.ReadProviderError's reading of it), or nil.
local function error_event(data, request_id)
  local top, i = decode(data, 1, 0)
  if type(top) ~= "table" or not top.keys or ws(data, i) <= #data then return nil end
  local e
  for k = 1, top.n do
    if top.keys[k] == "error" then e = top.vals[k] end -- the last one wins
  end
  if e == nil or e == NULL then return nil end
  local msg, code = "the provider failed mid-stream", "upstream_error"
  if type(e) == "string" then
    if e ~= "" then msg = e end
  elseif type(e) == "table" and e.keys then
    -- encoding/json: member names match case-insensitively, the last one wins, and a message,
    -- type or status that is not a string (or null) makes the whole object unreadable.
    local m, c, t, st, ok = "", "", "", "", true
    for k = 1, e.n do
      local name, v = lower(e.keys[k]), e.vals[k]
      if name == "code" then
        c = type(v) == "string" and v or ""
      elseif (name == "message" or name == "type" or name == "status") and v ~= NULL then
        if type(v) ~= "string" then
          ok = false
        elseif name == "message" then
          m = v
        elseif name == "type" then
          t = v
        else
          st = v
        end
      end
    end
    if ok and m ~= "" then
      msg = m
      if c ~= "" then code = c elseif t ~= "" then code = t elseif st ~= "" then code = lower(st) end
    end
  end
  return error_body(msg, code, request_id)
end

-- Cheap reading of the events that are not errors. An event's data is read where it lies: in
-- the event itself when it is the usual one data line (s is the event, its JSON object starts
-- at o), else in the data lines joined (o is 1).

-- member finds a member whose name is name (given with its closing quote only: a plain search
-- stops at each occurrence of its first byte, and a quote is the most frequent byte of JSON)
-- and whose value starts with the byte first, from i on, whatever whitespace surrounds the
-- colon (answer.go's hasMember); it returns where the value starts. A quoted name followed by a
-- colon cannot be the inside of a JSON string (every quote in one is escaped): it is a member.
local function member(s, name, first, i)
  local len = #name
  while true do
    local k = find(s, name, i, true)
    if not k then return nil end
    if byte(s, k - 1) == 34 then
      local v = k + len
      local c = byte(s, v + 1)
      if byte(s, v) == 58 and c ~= 32 and c ~= 9 and c ~= 10 and c ~= 13 then -- "name":value
        if c == first then return v + 1 end
      else
        local _, w = find(s, "^[ \t\r\n]*:[ \t\r\n]*", v)
        if w and byte(s, w + 1) == first then return w + 1 end
      end
    end
    i = k + 1
  end
end

-- quoted reports whether s holds the quoted string name from i on (name given with its closing
-- quote only, as member takes it).
local function quoted(s, name, i)
  while true do
    local k = find(s, name, i, true)
    if not k or byte(s, k - 1) == 34 then return k end
    i = k + 1
  end
end

-- string_end returns the index of the quote that closes the string whose text starts at i: the
-- first quote not escaped by an odd run of backslashes.
local function string_end(s, i)
  while true do
    local j = find(s, '"', i, true)
    if not j then return nil end
    local k = j - 1
    while byte(s, k) == 92 do k = k - 1 end
    if (j - 1 - k) % 2 == 0 then return j end
    i = j + 1
  end
end

-- top_level reports whether position v is in the own members of the object that starts at s[o]
-- (depth 1). Most events have no bracket before the member asked for, which settles it.
local function top_level(s, o, v)
  local b, a = find(s, "{", o + 1, true), find(s, "[", o + 1, true)
  if (not b or b > v) and (not a or a > v) then return true end
  local depth, i = 0, o
  while true do
    local j = find(s, '[{}%[%]"]', i)
    if not j or j >= v then return depth == 1 end
    local c = byte(s, j)
    if c == 34 then
      local e = string_end(s, j + 1)
      if not e or e >= v then return false end
      i = e + 1
    else
      depth = (c == 123 or c == 91) and depth + 1 or depth - 1
      i = j + 1
    end
  end
end

local function top_member(s, o, name, first)
  local i = o
  while true do
    local v = member(s, name, first, i)
    if not v or top_level(s, o, v) then return v end
    i = v
  end
end

-- value_end returns the index of the bracket closing the object or array opened at s[i].
local function value_end(s, i)
  local depth = 0
  while true do
    local j = find(s, '[{}%[%]"]', i)
    if not j then return nil end
    local c = byte(s, j)
    if c == 34 then
      j = string_end(s, j + 1)
      if not j then return nil end
    elseif c == 123 or c == 91 then
      depth = depth + 1
    else
      depth = depth - 1
      if depth == 0 then return j end
    end
    i = j + 1
  end
end

-- INT64_MAX and INT64_MIN's digits: a count beyond them is no int64 (a double would take it).
local INT64_MAX, INT64_MIN = "9223372036854775807", "9223372036854775808"

-- count_int reads the integer member name of the object s: 0 when absent or null, nil when it
-- is not an integer an int64 holds (Go's decoder then rejects the whole usage).
local function count_int(s, name)
  local i = 1
  while true do
    local _, e = find(s, name, i, true)
    if not e then return 0 end
    local _, c = find(s, "^[ \t\r\n]*:[ \t\r\n]*", e + 1)
    if c and top_level(s, 1, c + 1) then
      if sub(s, c + 1, c + 4) == "null" then return 0 end
      local _, d = find(s, "^-?%d+", c + 1)
      if not d or find(s, "^[%.eE]", d + 1) then return nil end
      local neg = byte(s, c + 1) == 45
      local digits = sub(s, neg and c + 2 or c + 1, d)
      if #digits > 19 or (#digits == 19 and digits > (neg and INT64_MIN or INT64_MAX)) then return nil end
      return tonumber(sub(s, c + 1, d))
    end
    i = e + 1
  end
end

local function details(u, name, count)
  local p = top_member(u, 1, name, 123)
  local e = p and value_end(u, p)
  return e and count_int(sub(u, p, e), count) or 0
end

-- read_usage records a usage object (at p) with counts (answer.go's meter) and reports whether
-- the event is the usage-only chunk (no choices).
local function read_usage(st, s, o, p)
  local e = value_end(s, p)
  if not e then return false end
  local u = sub(s, p, e)
  local pt, ct = count_int(u, '"prompt_tokens"'), count_int(u, '"completion_tokens"')
  if not pt or not ct or (pt <= 0 and ct <= 0) then return false end
  st.usage, st.prompt_tokens, st.completion_tokens = true, pt, ct
  st.cached_tokens = details(u, 'prompt_tokens_details"', '"cached_tokens"')
  st.image_tokens = details(u, 'completion_tokens_details"', '"image_tokens"')
  st.changed = true
  local c = top_member(s, o, 'choices"', 91)
  return c == nil or find(s, "^%[[ \t\r\n]*%]", c) ~= nil
end

-- count_strings adds up the UTF-8 bytes of the string values of the members named name, as
-- decoded: an escape counted as the bytes of the character it stands for (a surrogate pair as
-- one 4-byte character, a lone surrogate as U+FFFD's 3). Bytes, not characters: a token is never
-- less than a byte, so an estimate from them (billing.TokensFromBytes) bounds what it misses in
-- any script, where characters let a text of many tokens a character pass for a few.
local function count_strings(s, name, i)
  local n = 0
  while true do
    local v = member(s, name, 34, i)
    if not v then return n end
    local e = string_end(s, v + 1)
    if not e then return n end
    n = n + (e - v - 1)
    local b = find(s, "\\", v + 1, true)
    while b and b < e do -- an escape's bytes are the bytes of what it stands for
      if byte(s, b + 1) ~= 117 then
        n, b = n - 1, b + 2
      else
        local h = hex4(s, b + 2) or 0
        local low = h >= 0xD800 and h <= 0xDBFF and sub(s, b + 6, b + 7) == "\\u" and hex4(s, b + 8)
        if low and low >= 0xDC00 and low <= 0xDFFF then
          n, b = n - 8, b + 12
        else
          n, b = n - 6 + (h < 0x80 and 1 or h < 0x800 and 2 or 3), b + 6
        end
      end
      b = find(s, "\\", b, true)
    end
    i = e + 1
  end
end

-- count_text adds the bytes of the text a tokenizer would count for an estimate (answer.go's
-- meter): content, reasoning (billed as output: a stream cut while the model thinks is not
-- free), and tool calls' names and arguments. Reasoning comes as reasoning_content (DeepSeek,
-- vLLM) or reasoning (OpenRouter, Ollama); a server sending both names sends the text twice,
-- so the longer counts (openai.ReasoningFields). OpenRouter's reasoning_details repeats it too
-- and is not counted.
local function count_text(st, s, o)
  local n = count_strings(s, 'content"', o)
  if find(s, 'tool_calls"', o, true) then
    n = n + count_strings(s, 'name"', o) + count_strings(s, 'arguments"', o)
  end
  if find(s, 'reasoning', o, true) then
    local r, rc = count_strings(s, 'reasoning"', o), count_strings(s, 'reasoning_content"', o)
    n = n + (r > rc and r or rc)
  end
  st.bytes = st.bytes + n
end

-- replace_model is answer.go's replaceModel: the first top-level "model" string becomes model
-- (JSON-encoded) unless it already says it; it returns s so changed, or nil.
local function replace_model(s, o, model)
  local i = o
  while true do
    local v = member(s, 'model"', 34, i)
    if not v then return nil end
    local e = string_end(s, v + 1)
    if not e then return nil end
    if top_level(s, o, v) then
      if e - v + 1 == #model and sub(s, v, e) == model then return nil end
      return sub(s, 1, v - 1) .. model .. sub(s, e + 1)
    end
    i = e + 1
  end
end

-- SSE events (extproc/sse's rules): "data:" lines, one leading space dropped, joined with "\n".
local function data_value(line)
  if line == "data" then return "" end
  if sub(line, 1, 5) ~= "data:" then return nil end
  return sub(line, byte(line, 6) == 32 and 7 or 6)
end

-- each_line calls fn(line, from, to) for each line of ev, [from, to] including its line end.
local function each_line(ev, fn)
  local i, len = 1, #ev
  while i <= len do
    local le = find(ev, "[\r\n]", i)
    if not le then fn(sub(ev, i), i, len); return end
    local to = le
    if byte(ev, le) == 13 and byte(ev, le + 1) == 10 then to = le + 1 end
    fn(sub(ev, i, le - 1), i, to)
    i = to + 1
  end
end

-- event_data returns where an event's data is: the string holding it, and its first and last
-- byte there (the event itself for one data line, else its data lines joined); nil without
-- data lines. An event ends at its first blank line, so a first line whose end is followed by
-- another line end is the only one.
local function event_data(ev)
  local d, a, t, a2, colon = byte(ev, 1, 5)
  if d == 100 and a == 97 and t == 116 and a2 == 97 and colon == 58 then -- "data:"
    local vs = byte(ev, 6) == 32 and 7 or 6
    local le, cr = find(ev, "\n", vs, true), find(ev, "\r", vs, true)
    if cr and (not le or cr < le) then le = cr end
    if le then
      local c = byte(ev, le + ((byte(ev, le) == 13 and byte(ev, le + 1) == 10) and 2 or 1))
      if c == 10 or c == 13 then return ev, vs, le - 1 end
    end
  end
  local data
  each_line(ev, function(line)
    local v = data_value(line)
    if v then data = data and (data .. "\n" .. v) or v end
  end)
  if data then return data, 1, #data end
end

-- replace_data is extproc/sse's ReplaceData: the first data line carries data, later data lines
-- go, other lines stay.
local function replace_data(ev, data)
  local out, done = {}, false
  each_line(ev, function(line, from, to)
    if not data_value(line) then
      out[#out + 1] = sub(ev, from, to)
    elseif not done then
      done = true
      out[#out + 1] = "data: " .. data .. sub(ev, from + #line, to)
    end
  end)
  return concat(out)
end

-- on_event is answer.go's chunk for one whole event: what the client gets instead of ev.
local function on_event(st, ev)
  local s, o, z = event_data(ev)
  if s == nil then return ev end
  if byte(s, o) ~= 123 then
    if not st.done and find(sub(s, o, z), "^%s*%[DONE%]%s*$") then st.done, st.changed = true, true end
    return ev
  end
  if not st.finished and member(s, 'finish_reason"', 34, o) then st.finished, st.changed = true, true end
  if not quoted(s, 'choices"', o) and quoted(s, 'error"', o) then -- choices come early
    local e = error_event(s == ev and sub(s, o, z) or s, st.request_id)
    if e then
      st.error, st.changed = true, true
      if s == ev then return "data: " .. e .. sub(ev, z + 1) end
      return replace_data(ev, e)
    end
  end
  local u = top_member(s, o, 'usage"', 123)
  if u and read_usage(st, s, o, u) and st.drop_usage then return "" end
  count_text(st, s, o)
  local d = st.model and replace_model(s, o, st.model)
  if not d then return ev end
  if s == ev then -- the data line itself, which Go writes as "data: " whatever it was
    return o == 7 and d or "data: " .. sub(d, o)
  end
  return replace_data(ev, d)
end

-- event_end finds the blank line that ends the event searched from scan: LF or CRLF line ends,
-- else a lone CR's.
local function event_end(buf, scan)
  local i = scan
  while true do
    local k = find(buf, "\n", i, true)
    if not k then break end
    local c = byte(buf, k + 1)
    if c == 10 then return k + 1 end
    if c == 13 and byte(buf, k + 2) == 10 then return k + 2 end
    i = k + 1
  end
  local c = find(buf, "\r\r", scan, true)
  return c and c + 1
end

local feed

-- skip passes the rest of an oversized event untouched: b up to the event's end.
local function skip(st, b)
  local t = st.tail .. b
  local e = event_end(t, 1)
  if not e then
    st.tail = sub(t, -2)
    return b
  end
  local k = e - #st.tail
  st.skipping, st.tail = false, ""
  return sub(b, 1, k) .. feed(st, sub(b, k + 1))
end

-- feed reads the next piece of the stream and returns what the client gets for it: every event
-- it completes, rewritten; an event whose end has not arrived is held until it has.
feed = function(st, b)
  if st.skipping then return skip(st, b) end
  local buf = st.held == "" and b or st.held .. b
  local out, n = st.out, 0
  local pos, scan, len = 1, st.scan, #buf
  while pos <= len do
    local c = byte(buf, pos)
    if c == 10 or c == 13 then -- blank lines between events go on as they are
      local s = find(buf, "[^\r\n]", pos)
      local stop = (s or len + 1) - 1
      n = n + 1; out[n] = sub(buf, pos, stop)
      pos = stop + 1
      if not s then break end
    end
    local e = event_end(buf, scan > pos and scan or pos)
    if not e then break end
    n = n + 1; out[n] = on_event(st, (pos == 1 and e == len) and buf or sub(buf, pos, e))
    pos, scan = e + 1, e + 1
  end
  st.held = pos <= len and sub(buf, pos) or ""
  st.scan = #st.held > 1 and #st.held - 1 or 1
  if #st.held > MAX_HELD then
    n = n + 1; out[n] = st.held
    st.skipping, st.tail, st.held, st.scan, st.oversized, st.changed = true, sub(st.held, -2), "", 1, true, true
  end
  if n == 1 then return out[1] end
  return concat(out, "", 1, n)
end

local CUT = "the provider's stream ended before the answer finished (no finish_reason and no [DONE]): the answer is incomplete"

-- finish ends the stream: the held tail is a last event, and a stream that neither finished nor
-- failed gets answer.go's error event, so no client takes a cut answer for a whole one.
local function finish(st)
  if st.failed then return "" end
  local out = ""
  if st.held ~= "" then
    out = on_event(st, st.held)
    st.held = ""
  end
  if not st.finished and not st.done and not st.error then
    st.error, st.changed = true, true
    out = out .. "data: " .. error_body(CUT, "upstream_error", st.request_id) .. "\n\n"
  end
  return out
end

-- guarded runs step (feed or finish) so that a failure of the script loses no byte: what it
-- held goes on untouched with the chunk, and so does the rest of the answer (tollway.meter says
-- failed; its counts stop there).
local function guarded(handle, st, step, b)
  if st.failed then return b or "" end
  local held = st.held
  local ok, out = pcall(step, st, b)
  if ok then return out end
  st.failed, st.changed, st.held = true, true, ""
  handle:logErr("tollway stream meter: " .. tostring(out))
  return held .. (b or "")
end

local FLAGS = { "finished", "done", "error", "usage", "prompt_tokens", "completion_tokens",
  "cached_tokens", "image_tokens", "oversized", "failed", "ended" }

-- publish writes what changed to tollway.meter: text_bytes once LAG_BYTES went unpublished or
-- with anything else. The metadata object is fetched anew each time: Envoy invalidates it
-- whenever the script yields for the next chunk.
local function publish(handle, st)
  local lag = st.bytes - st.pub_bytes
  if lag < LAG_BYTES and not st.changed then return end
  local dm = handle:streamInfo():dynamicMetadata()
  if lag > 0 then
    dm:set(METER, "text_bytes", st.bytes)
    st.pub_bytes = st.bytes
  end
  if st.changed then
    local pub = st.pub
    for _, k in ipairs(FLAGS) do
      local v = st[k]
      if v and v ~= pub[k] then
        dm:set(METER, k, v)
        pub[k] = v
      end
    end
    st.changed = false
  end
end

function envoy_on_response(handle)
  local lane = handle:streamInfo():dynamicMetadata():get(LANE)
  if not lane or lane.fast ~= true then return end
  -- Only a successful event stream is an answer to meter: a provider's error answer or a whole
  -- JSON body goes on untouched even if the lane was chosen before the answer came.
  local h = handle:headers()
  local status, ctype = h:get(":status") or "", h:get("content-type") or ""
  if sub(status, 1, 1) ~= "2" or not find(lower(ctype), "text/event-stream", 1, true) then return end
  -- The body changes size: a provider's content-length would cut it or make the client wait.
  if h:get("content-length") then h:remove("content-length") end
  local st = {
    model = type(lane.model) == "string" and lane.model ~= "" and json_string(lane.model) or nil,
    drop_usage = lane.drop_usage == true,
    request_id = type(lane.request_id) == "string" and lane.request_id or "",
    held = "", scan = 1, tail = "", out = {}, bytes = 0, pub_bytes = 0, pub = {}, changed = false,
  }
  handle:streamInfo():dynamicMetadata():set(METER, "text_bytes", 0)
  local last, last_out
  for chunk in handle:bodyChunks() do
    local len = chunk:length()
    local b = len > 0 and chunk:getBytes(0, len) or ""
    local out = guarded(handle, st, feed, b)
    if out ~= b then chunk:setBytes(out) end
    last, last_out = chunk, out
    publish(handle, st)
  end
  local tail = guarded(handle, st, finish)
  -- The last chunk is still writable when the body ended with data (an empty end-of-stream
  -- chunk included); not when it ended with trailers, which Lua cannot add a body to.
  if tail ~= "" and not (last and pcall(last.setBytes, last, last_out .. tail)) then
    handle:logWarn("tollway stream meter: the answer ended without a body chunk to end it on; " .. #tail .. " bytes not sent")
  end
  st.ended, st.changed = true, true
  publish(handle, st)
end
