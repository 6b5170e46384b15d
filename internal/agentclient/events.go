// This file implements the reading of an exec's events: each output chunk is
// copied into one buffer the stream reuses, instead of a fresh one per chunk.

package agentclient

import (
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "sbx.dev/sbx/api/agent/sbxagent"
)

// eventReader reads the events of one exec or attach stream. An output event
// (the bulk of a stream: a build's log, a file cat'ed) is decoded into a
// buffer and messages the reader keeps, so a long stream allocates nothing
// per chunk: with a fresh 256 KiB copy per chunk, allocating and collecting
// them was a quarter of the daemon's CPU while it streamed. So an output
// event's data is valid only until the next read; every consumer of
// sandbox.ExecEvent writes it out before it returns (see there).
type eventReader struct {
	conn connect.StreamingClientConn
	ev   *pb.ExecEvent // what the last DecodeProto decoded

	// The last output event, its parts kept for the next one.
	buf   []byte
	out   pb.Output
	oneof pb.ExecEvent_Output
	outEv pb.ExecEvent
}

// next reads the next event; io.EOF at the stream's clean end.
func (r *eventReader) next() (*pb.ExecEvent, error) {
	r.ev = nil
	if err := r.conn.Receive(r); err != nil {
		return nil, err
	}
	if r.ev == nil {
		return nil, errors.New("no event decoded") // not reached: DecodeProto sets it or fails
	}
	return r.ev, nil
}

// DecodeProto implements protocodec.Decoder. An event that is exactly one
// output (its stream and its data, each at most once, nothing else) is
// decoded here; anything else goes through protobuf's own unmarshal, as
// every reply of the untrusted agent does. Both give the same message.
func (r *eventReader) DecodeProto(b []byte) error {
	if out, ok := r.output(b); ok {
		r.oneof = pb.ExecEvent_Output{Output: out}
		r.outEv = pb.ExecEvent{Event: &r.oneof}
		r.ev = &r.outEv
		return nil
	}
	ev := new(pb.ExecEvent)
	if err := proto.Unmarshal(b, ev); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", ev, err)
	}
	r.ev = ev
	return nil
}

// output decodes b when it is an ExecEvent holding only an Output (field 2)
// with at most a stream (field 1, varint) and data (field 2, bytes); ok is
// false for any other shape, which the caller decodes in full.
func (r *eventReader) output(b []byte) (_ *pb.Output, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return nil, false
	}
	inner, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return nil, false
	}
	var (
		stream       uint64
		data         []byte
		seen1, seen2 bool // each field at most once: a repeat merges or replaces
	)
	for len(inner) > 0 {
		num, typ, n := protowire.ConsumeTag(inner)
		if n < 0 {
			return nil, false
		}
		inner = inner[n:]
		switch {
		case num == 1 && typ == protowire.VarintType && !seen1:
			v, n := protowire.ConsumeVarint(inner)
			if n < 0 {
				return nil, false
			}
			stream, seen1, inner = v, true, inner[n:]
		case num == 2 && typ == protowire.BytesType && !seen2:
			v, n := protowire.ConsumeBytes(inner)
			if n < 0 {
				return nil, false
			}
			data, seen2, inner = v, true, inner[n:]
		default:
			return nil, false
		}
	}
	r.out = pb.Output{Stream: pb.Stream(int32(stream))}
	if len(data) > 0 { // empty or absent: nil, as protobuf decodes it
		r.buf = append(r.buf[:0], data...)
		r.out.Data = r.buf
	}
	return &r.out, true
}

// errEnd reports whether err is a stream's clean end.
func errEnd(err error) bool { return errors.Is(err, io.EOF) }
