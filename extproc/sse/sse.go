// Package sse frames server-sent event streams that arrive in pieces of any size (Envoy's body
// chunks, a provider's writes): it is the one SSE framer of the gateway, used to meter and
// rewrite the client's stream and to read the streams of providers that speak other APIs.
//
// Lines end with LF, CRLF or CR, as the SSE specification allows; a blank line ends an event.
package sse

import "bytes"

// Framer splits a byte stream into whole events, holding an incomplete tail between calls. The
// zero value is ready to use. Work is linear in the input however it is cut: no byte is
// searched twice.
type Framer struct {
	buf  []byte // the incomplete event carried over from earlier input
	line int    // offset in buf where the current, unfinished line starts
	scan int    // offset in buf from which to search for the next line end
}

// Feed adds b to the stream and calls fn with each event it completes: the event's raw bytes
// through its blank line, so the events joined give back the input exactly (blank lines between
// events arrive as events of their own, without data). An event split across calls, even inside
// a CRLF pair, is passed once its end arrives. With end, the tail that has no blank line yet is
// passed as a last event. The slice given to fn is only valid during the call; an error from fn
// stops the feed and is returned.
func (f *Framer) Feed(b []byte, end bool, fn func(event []byte) error) error {
	buf := b
	if len(f.buf) > 0 {
		buf = append(f.buf, b...)
	}
	start, line, scan := 0, f.line, f.scan
	ends := lineEnds{b: buf, lf: -1}
	for {
		k := ends.next(scan)
		if k < 0 {
			scan = len(buf)
			break
		}
		n := 1
		if buf[k] == '\r' {
			if k+1 == len(buf) && !end {
				scan = k // a CR at the end may be the first half of a CRLF: wait for the next byte
				break
			}
			if k+1 < len(buf) && buf[k+1] == '\n' {
				n = 2
			}
		}
		blank := k == line
		line, scan = k+n, k+n
		if blank {
			if err := fn(buf[start:line]); err != nil {
				f.keep(buf, line, line, scan)
				return err
			}
			start = line
		}
	}
	if end && start < len(buf) {
		err := fn(buf[start:])
		f.keep(buf, len(buf), len(buf), len(buf))
		return err
	}
	f.keep(buf, start, line, scan)
	return nil
}

// keep carries buf[start:] over to the next call, with the line and scan offsets made relative.
func (f *Framer) keep(buf []byte, start, line, scan int) {
	f.buf = append(f.buf[:0], buf[start:]...) // copy: buf may be the caller's slice
	f.line, f.scan = line-start, scan-start
}

// Pending reports whether an incomplete event is being held.
func (f *Framer) Pending() bool { return len(f.buf) > 0 }

// Data returns an event's data: the values of its data lines (one leading space removed) joined
// with "\n", or nil when it has none. With one data line, the result is a subslice of event.
func Data(event []byte) []byte {
	var out []byte
	lines := 0
	eachLine(event, func(line []byte, _, _ int) {
		v, ok := dataValue(line)
		if !ok {
			return
		}
		switch lines++; lines {
		case 1:
			out = v
		case 2:
			out = append(append(append([]byte(nil), out...), '\n'), v...)
		default:
			out = append(append(out, '\n'), v...)
		}
	})
	if lines == 0 {
		return nil
	}
	if out == nil {
		return []byte{}
	}
	return out
}

// ReplaceData returns the event with its data replaced by data: the first data line carries it
// (with the event's own line ending), later data lines are dropped, other lines (event:, id:,
// comments) and the blank line stay as they were. data must hold no line break.
func ReplaceData(event, data []byte) []byte {
	out := make([]byte, 0, len(event)+len(data))
	done := false
	eachLine(event, func(line []byte, from, to int) {
		if _, ok := dataValue(line); !ok {
			out = append(out, event[from:to]...)
			return
		}
		if !done {
			done = true
			out = append(append(append(out, "data: "...), data...), event[from+len(line):to]...)
		}
	})
	return out
}

// eachLine calls fn with each line of event without its line ending, and the line's span
// [from, to) in event including the ending.
func eachLine(event []byte, fn func(line []byte, from, to int)) {
	ends := lineEnds{b: event, lf: -1}
	for from := 0; from < len(event); {
		k := ends.next(from)
		if k < 0 {
			fn(event[from:], from, len(event))
			return
		}
		to := k + 1
		if event[k] == '\r' && to < len(event) && event[to] == '\n' {
			to++
		}
		fn(event[from:k], from, to)
		from = to
	}
}

// lineEnds finds the line ends (CR or LF) of b at increasing offsets with memchr-speed
// searches, remembering the next LF so that no byte is searched for it twice: lines that end
// with a lone CR would otherwise make every search run on to the next LF (quadratic).
type lineEnds struct {
	b  []byte
	lf int // offset of the next LF at or after the last search, len(b) if none; -1 unknown
}

// next returns the offset of the first CR or LF at or after from, or -1.
func (l *lineEnds) next(from int) int {
	if l.lf < from {
		l.lf = len(l.b)
		if i := bytes.IndexByte(l.b[from:], '\n'); i >= 0 {
			l.lf = from + i
		}
	}
	if cr := bytes.IndexByte(l.b[from:l.lf], '\r'); cr >= 0 {
		return from + cr
	}
	if l.lf == len(l.b) {
		return -1
	}
	return l.lf
}

// dataValue reads a "data" field line: "data:value", "data: value" or a bare "data".
func dataValue(line []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(line, []byte("data"))
	if !ok {
		return nil, false
	}
	if len(rest) == 0 {
		return rest, true
	}
	if rest[0] != ':' {
		return nil, false // another field whose name starts with "data"
	}
	rest = rest[1:]
	if len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	return rest, true
}
