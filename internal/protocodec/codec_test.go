package protocodec

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	fspb "sbx.dev/sbx/api/agent/filesystem"
	procpb "sbx.dev/sbx/api/agent/process"
	pb "sbx.dev/sbx/api/agent/sbxagent"
)

// messages covers the field kinds of the protocol: maps, oneofs, bytes,
// repeated messages, sint32, timestamps, and every exec event.
func messages() []proto.Message {
	return []proto.Message{
		&pb.ExecRequest{Argv: []string{"sh", "-c", "echo héllo"}, Cwd: "/workspace", Env: map[string]string{"A": "1", "B": "", "C": "x=y"},
			Stdin: []byte{0, 1, 2, 255}, KeepStdinOpen: true, TimeoutMs: 30000, Background: true, Stream: true, OutputLimitBytes: 1 << 40, Tag: "t", StreamBounded: true},
		&pb.ExecEvent{Event: &pb.ExecEvent_Started{Started: &pb.Started{Id: "p1", Pid: 42}}},
		&pb.ExecEvent{Event: &pb.ExecEvent_Output{Output: &pb.Output{Data: bytes.Repeat([]byte("ab"), 5000)}}},
		&pb.ExecEvent{Event: &pb.ExecEvent_Result{Result: &pb.ExecResult{ExitCode: -9, Reason: "signal", Signal: 9, DurationMs: 12,
			Stdout: []byte("out"), Stderr: []byte("err"), Truncated: true, StdoutDropped: 7, StdoutPath: "/tmp/o", StderrBytes: 3}}},
		&pb.ExecEvent{Event: &pb.ExecEvent_Keepalive{Keepalive: &pb.Keepalive{}}},
		&pb.ExecEvent{Event: &pb.ExecEvent_Dropped{Dropped: &pb.Dropped{Bytes: 99}}},
		&pb.ExecEvent{},
		&pb.ListProcessesResponse{Processes: []*pb.ProcessStatus{{Id: "a", StartedAt: timestamppb.New(time.Unix(1700000000, 5))}, {Id: "b"}}},
		&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "true"}, Envs: map[string]string{"K": "v"}}},
		&fspb.EntryInfo{Name: "f", Path: "/f", Size: 5, ModifiedTime: timestamppb.New(time.Unix(1, 2))},
	}
}

// The codec's bytes are protobuf's: each side decodes the other's.
func TestRoundTrip(t *testing.T) {
	for _, m := range messages() {
		for _, c := range []Codec{{}, {Untrusted: true}} {
			got, err := c.Marshal(m)
			if err != nil {
				t.Fatalf("%T: %v", m, err)
			}
			ref, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ref) {
				t.Errorf("%T: %d bytes, protobuf's %d", m, len(got), len(ref))
			}
			back := m.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
				t.Errorf("%T: protobuf decodes the codec's bytes to %v (%v), want %v", m, back, err, m)
			}
			back = m.ProtoReflect().New().Interface()
			if err := c.Unmarshal(ref, back); err != nil || !proto.Equal(back, m) {
				t.Errorf("%T: the codec decodes protobuf's bytes to %v (%v), want %v", m, back, err, m)
			}
			// Appending keeps what is before. (Map entries come in any order.)
			app, err := c.MarshalAppend([]byte("pre"), m)
			back = m.ProtoReflect().New().Interface()
			if err != nil || !bytes.Equal(app[:3], []byte("pre")) || proto.Unmarshal(app[3:], back) != nil || !proto.Equal(back, m) {
				t.Errorf("%T: MarshalAppend = %q, %v", m, app, err)
			}
		}
	}
}

// Unmarshal replaces what the message held, as protobuf's does.
func TestUnmarshalResets(t *testing.T) {
	for _, c := range []Codec{{}, {Untrusted: true}} {
		b, _ := c.Marshal(&pb.ExecRequest{Argv: []string{"new"}})
		m := &pb.ExecRequest{Argv: []string{"old"}, Cwd: "/old", Env: map[string]string{"OLD": "1"}}
		if err := c.Unmarshal(b, m); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(m, &pb.ExecRequest{Argv: []string{"new"}}) {
			t.Errorf("untrusted %v: after Unmarshal: %v, want only the new argv", c.Untrusted, m)
		}
	}
}

// A message without the generated methods goes through protobuf; anything
// else is an error naming its type.
func TestFallbackAndErrors(t *testing.T) {
	var c Codec
	ts := timestamppb.New(time.Unix(3, 4))
	b, err := c.Marshal(ts)
	if err != nil {
		t.Fatal(err)
	}
	var back timestamppb.Timestamp
	if err := c.Unmarshal(b, &back); err != nil || !proto.Equal(&back, ts) {
		t.Errorf("fallback round trip: %v, %v", &back, err)
	}
	if _, err := c.Marshal(&emptypb.Empty{}); err != nil {
		t.Errorf("empty: %v", err)
	}
	if _, err := c.Marshal("text"); err == nil {
		t.Error("Marshal of a string succeeded")
	}
	if err := c.Unmarshal(nil, new(int)); err == nil {
		t.Error("Unmarshal into an int succeeded")
	}
	if err := c.Unmarshal([]byte{0x0a, 0xff}, new(pb.ExecRequest)); err == nil {
		t.Error("a truncated field decoded")
	}
}

// dropUnknown clears the unknown fields of m and of every message in it.
func dropUnknown(m protoreflect.Message) (had bool) {
	if len(m.GetUnknown()) > 0 {
		m.SetUnknown(nil)
		had = true
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					had = dropUnknown(mv.Message()) || had
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := range v.List().Len() {
					had = dropUnknown(v.List().Get(i).Message()) || had
				}
			}
		case fd.Message() != nil:
			had = dropUnknown(v.Message()) || had
		}
		return true
	})
	return had
}

// Corrupted encodings. The untrusted codec decodes exactly as protobuf does.
// The codec decodes what protobuf decodes to a message without unknown
// fields, to the same message; where both decode, they agree but for
// unknown fields (which vtprotobuf drops inside well-known types). It may
// accept what protobuf refuses (strings not checked for UTF-8, laxer map
// entries) and refuse what protobuf keeps as unknown (a known field with
// another wire type): input a peer of the same build never sends.
func TestCorruptAgreesWithProtobuf(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	laxer, stricter := 0, 0
	for _, m := range messages() {
		good, _ := proto.Marshal(m)
		for range 300 {
			b := append([]byte(nil), good...)
			for range 1 + r.IntN(3) {
				if len(b) > 0 {
					b[r.IntN(len(b))] = byte(r.Uint32())
				}
			}
			if r.IntN(4) == 0 && len(b) > 0 {
				b = b[:r.IntN(len(b))]
			}
			viaProto := m.ProtoReflect().New().Interface()
			errP := proto.Unmarshal(b, viaProto)
			viaUntrusted := m.ProtoReflect().New().Interface()
			errU := Codec{Untrusted: true}.Unmarshal(b, viaUntrusted)
			if (errU == nil) != (errP == nil) || (errU == nil && !proto.Equal(viaUntrusted, viaProto)) {
				t.Errorf("%T %x: untrusted codec %v (%v), protobuf %v (%v)", m, b, viaUntrusted, errU, viaProto, errP)
			}
			viaCodec := m.ProtoReflect().New().Interface()
			errC := Codec{}.Unmarshal(b, viaCodec)
			switch {
			case errP == nil && errC == nil:
				dropUnknown(viaCodec.ProtoReflect())
				dropUnknown(viaProto.ProtoReflect())
				if !proto.Equal(viaCodec, viaProto) {
					t.Errorf("%T %x: codec decoded %v, protobuf %v", m, b, viaCodec, viaProto)
				}
			case errP == nil:
				if !dropUnknown(viaProto.ProtoReflect()) {
					t.Errorf("%T %x: codec refused (%v) what protobuf decoded without unknown fields: %v", m, b, errC, viaProto)
				}
				stricter++
			case errC == nil:
				laxer++
			}
		}
	}
	t.Logf("of %d corrupted encodings, the codec decoded %d protobuf refused and refused %d protobuf kept as unknown fields", 300*len(messages()), laxer, stricter)
}

func BenchmarkExecEventMarshal(b *testing.B) {
	ev := &pb.ExecEvent{Event: &pb.ExecEvent_Output{Output: &pb.Output{Data: make([]byte, 4096)}}}
	b.Run("protocodec", func(b *testing.B) {
		var c Codec
		buf := make([]byte, 0, 8192)
		for b.Loop() {
			buf, _ = c.MarshalAppend(buf[:0], ev)
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		buf := make([]byte, 0, 8192)
		for b.Loop() {
			buf, _ = proto.MarshalOptions{}.MarshalAppend(buf[:0], ev)
		}
	})
}
