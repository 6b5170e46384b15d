// Package protocodec is the Connect codec of the agent protocol: protobuf's
// binary encoding through the size, marshal and unmarshal methods
// vtprotobuf generates beside each of the protocol's messages
// (api/agent/*/*_vtproto.pb.go), which use none of protobuf's reflection.
//
// protobuf-go builds a message type's coders by reflection, and expands its
// file's descriptors, the first time a process marshals one: a sandbox's
// agent is a new process, so each paid that on its first exec (~0.15-0.2 ms
// on its critical path), and in create+exec+destroy cycles protobuf's lazy
// initialisation was ~2.3% of all CPU.
//
// Decoding differs from protobuf's in two ways, both on input no peer of
// the same build sends: a proto3 string is not checked to be UTF-8, and a
// known field with another wire type is an error (protobuf keeps it as an
// unknown field). So a peer that is not trusted (the daemon's side: an agent
// runs in its sandbox) is read with Codec{Untrusted: true}: encoding without
// reflection, decoding with protobuf's own checks, whose reflection a
// long-lived daemon builds once.
//
// A message without the generated methods goes through protobuf's own
// functions, as with Connect's default codec.
package protocodec

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
)

// Name is the codec's name: Connect's binary protobuf codec, which it replaces.
const Name = "proto"

// Codec implements connect.Codec (and its MarshalAppend and MarshalStable
// extensions).
type Codec struct {
	// Untrusted decodes with protobuf's own unmarshal (strings checked to
	// be UTF-8, unknown wire types kept as unknown fields).
	Untrusted bool
}

// vtMessage is a message with vtprotobuf's generated methods.
type vtMessage interface {
	proto.Message
	Reset() // the generated one: no reflection
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
}

// Name implements connect.Codec.
func (Codec) Name() string { return Name }

// Marshal implements connect.Codec.
func (c Codec) Marshal(msg any) ([]byte, error) { return c.MarshalAppend(nil, msg) }

// MarshalAppend appends msg's encoding to dst.
func (Codec) MarshalAppend(dst []byte, msg any) ([]byte, error) {
	switch m := msg.(type) {
	case vtMessage:
		n := m.SizeVT()
		dst = slices.Grow(dst, n)
		if _, err := m.MarshalToSizedBufferVT(dst[len(dst) : len(dst)+n]); err != nil {
			return nil, fmt.Errorf("marshal %T: %w", msg, err)
		}
		return dst[:len(dst)+n], nil
	case proto.Message:
		return proto.MarshalOptions{}.MarshalAppend(dst, m)
	}
	return nil, fmt.Errorf("marshal %T: not a protobuf message", msg)
}

// MarshalStable implements Connect's stable codec: deterministic output
// (map entries in key order), as for GET requests' query strings.
func (Codec) MarshalStable(msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a protobuf message", msg)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// IsBinary implements Connect's stable codec.
func (Codec) IsBinary() bool { return true }

// Decoder is a destination that decodes a message itself, from either kind
// of peer: Unmarshal hands it the message's bytes, which belong to the
// caller's buffer and must not be kept.
type Decoder interface {
	DecodeProto(b []byte) error
}

// Unmarshal implements connect.Codec: msg is reset, then decoded from b.
func (c Codec) Unmarshal(b []byte, msg any) error {
	if d, ok := msg.(Decoder); ok {
		return d.DecodeProto(b)
	}
	m, vt := msg.(vtMessage)
	switch {
	case vt && !c.Untrusted:
		m.Reset()
		if err := m.UnmarshalVT(b); err != nil {
			return fmt.Errorf("unmarshal into %T: %w", msg, err)
		}
		return nil
	}
	pm, ok := msg.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal into %T: not a protobuf message", msg)
	}
	if err := proto.Unmarshal(b, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", msg, err)
	}
	return nil
}
