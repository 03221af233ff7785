-- Removes the usage event the gateway asked a provider for on behalf of a client that did not
-- (stream_options.include_usage): ext_proc marks such answers with x-tollway-drop-usage. It
-- runs in Envoy's worker, chunk by chunk as they pass, so no chunk waits on an ext_proc round
-- trip. Metering reads the untouched stream before this filter.
local MARK = "x-tollway-drop-usage"

-- usageOnly: an event whose data is a chunk with no choices and a usage object.
local function usageOnly(ev)
  return string.find(ev, '"choices"%s*:%s*%[%s*%]') ~= nil and string.find(ev, '"usage"%s*:%s*{') ~= nil
end

-- mayBeUsage: an unfinished event that may still turn out to be a usage event (a JSON data
-- line, or the start of one).
local function mayBeUsage(tail)
  if #tail <= 5 then return string.sub("data:", 1, #tail) == tail end
  return string.find(tail, "^data:%s*$") ~= nil or string.find(tail, "^data:%s*{") ~= nil
end

-- keep: the complete events of s that stay, and the unfinished tail to carry to the next chunk.
-- Only a tail that may still become a usage event is held back; anything else passes at once.
local function keep(s)
  local out, pos = {}, 1
  while true do
    local i, j = string.find(s, "\r?\n\r?\n", pos)
    if not i then break end
    local ev = string.sub(s, pos, j)
    if not usageOnly(ev) then out[#out + 1] = ev end
    pos = j + 1
  end
  local tail = string.sub(s, pos)
  if tail ~= "" and not mayBeUsage(tail) then
    out[#out + 1] = tail
    tail = ""
  end
  return table.concat(out), tail
end

function envoy_on_response(h)
  if h:headers():get(MARK) == nil then return end
  h:headers():remove(MARK)
  local carry = ""
  for chunk in h:bodyChunks() do
    local n, prev = chunk:length(), carry
    local s = prev
    if n > 0 then s = s .. chunk:getBytes(0, n) end
    local out
    if n == 0 then
      out, carry = s, "" -- the end of the stream: what was held goes out
    else
      out, carry = keep(s)
    end
    if prev ~= "" or out ~= s then chunk:setBytes(out) end
  end
end
