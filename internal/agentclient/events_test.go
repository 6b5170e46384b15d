package agentclient

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
	"sbx.dev/sbx/internal/sandbox"
)

// eventSamples are encodings an agent could send, well formed or not: every
// kind of event, output with and without data, and shapes the reader's own
// decoding must leave to protobuf's (unknown fields, repeated fields, other
// wire types, truncation).
func eventSamples(t testing.TB) [][]byte {
	enc := func(ev *pb.ExecEvent) []byte {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	out := func(stream pb.Stream, data []byte) []byte {
		return enc(&pb.ExecEvent{Event: &pb.ExecEvent_Output{Output: &pb.Output{Stream: stream, Data: data}}})
	}
	// raw builds an ExecEvent whose field 2 holds inner as is.
	raw := func(inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), inner)
	}
	data := func(b []byte, d []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), d)
	}
	stream := func(b []byte, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), v)
	}
	chunk := bytes.Repeat([]byte{0, 0xff, 'a', '\n'}, 1000)
	samples := [][]byte{
		out(pb.Stream_STREAM_STDOUT, chunk),
		out(pb.Stream_STREAM_STDERR, []byte("error\n")),
		out(pb.Stream_STREAM_STDOUT, nil),
		out(pb.Stream(7), []byte{1}), // an enum value the schema does not name
		raw(nil),                     // an output with nothing set
		raw(data(nil, nil)),          // data present and empty
		raw(stream(data(nil, []byte("x")), 2)),
		raw(stream(nil, 1<<40)),                                // a stream past int32
		raw(data(data(nil, []byte("a")), []byte("b"))),         // data twice
		raw(stream(stream(data(nil, []byte("a")), 1), 2)),      // stream twice
		raw(protowire.AppendVarint(data(nil, []byte("a")), 3)), // a stray byte
		raw(protowire.AppendTag(data(nil, []byte("a")), 9, 0)), // an unknown field, cut short
		raw(protowire.AppendVarint(protowire.AppendTag(data(nil, []byte("a")), 9, protowire.VarintType), 5)), // an unknown field
		raw(protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 5)),                    // data as a varint
		raw(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("s"))),            // stream as bytes
		append(out(pb.Stream_STREAM_STDOUT, []byte("a")), out(pb.Stream_STREAM_STDERR, []byte("b"))...),      // two outputs: merged
		append(out(pb.Stream_STREAM_STDOUT, []byte("a")), enc(&pb.ExecEvent{Event: &pb.ExecEvent_Keepalive{Keepalive: &pb.Keepalive{}}})...),
		enc(&pb.ExecEvent{Event: &pb.ExecEvent_Started{Started: &pb.Started{Id: "p1", Pid: 42}}}),
		// A started event whose id is not UTF-8: protobuf refuses it.
		protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
			protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("\xff\xfe"))),
		enc(&pb.ExecEvent{Event: &pb.ExecEvent_Result{Result: &pb.ExecResult{ExitCode: 3, Stdout: chunk, Reason: "timeout"}}}),
		enc(&pb.ExecEvent{Event: &pb.ExecEvent_Dropped{Dropped: &pb.Dropped{Stream: pb.Stream_STREAM_STDERR, Bytes: 9}}}),
		enc(&pb.ExecEvent{Event: &pb.ExecEvent_Keepalive{Keepalive: &pb.Keepalive{}}}),
		{},
		{0xff},
		out(pb.Stream_STREAM_STDOUT, chunk)[:100], // cut short
	}
	return samples
}

// checkAsProtobuf fails unless the reader decodes b exactly as protobuf's
// own unmarshal does: both fail, or both give equal events whose output
// data is nil alike.
func checkAsProtobuf(t testing.TB, r *eventReader, b []byte) {
	t.Helper()
	want := new(pb.ExecEvent)
	werr := proto.Unmarshal(b, want)
	r.ev = nil
	gerr := r.DecodeProto(b)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("decoding %x: error %v, protobuf's %v", b, gerr, werr)
	}
	if werr != nil {
		return
	}
	if !proto.Equal(r.ev, want) {
		t.Fatalf("decoding %x: %v, protobuf's %v", b, r.ev, want)
	}
	if w := want.GetOutput(); w != nil && (w.Data == nil) != (r.ev.GetOutput().Data == nil) {
		t.Fatalf("decoding %x: data %#v, protobuf's %#v", b, r.ev.GetOutput().Data, w.Data)
	}
}

func TestEventReaderDecodesAsProtobuf(t *testing.T) {
	var r eventReader
	samples := eventSamples(t)
	for _, b := range samples {
		checkAsProtobuf(t, &r, b)
	}
	// Each sample again with bytes changed, cut or added at random.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		b := bytes.Clone(samples[i%len(samples)])
		for range 1 + rng.IntN(3) {
			switch op := rng.IntN(3); {
			case op == 0 && len(b) > 0:
				b[rng.IntN(len(b))] = byte(rng.IntN(256))
			case op == 1 && len(b) > 0:
				b = b[:rng.IntN(len(b))]
			default:
				b = append(b, byte(rng.IntN(256)))
			}
		}
		checkAsProtobuf(t, &r, b)
	}
}

func FuzzEventReader(f *testing.F) {
	for _, b := range eventSamples(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r eventReader
		checkAsProtobuf(t, &r, b)
	})
}

// TestEventReaderReusesItsBuffer: a stream's output events are decoded into
// the same buffer, with no allocation per chunk once it is large enough.
func TestEventReaderReusesItsBuffer(t *testing.T) {
	chunk := func(c byte) []byte {
		b, err := proto.Marshal(&pb.ExecEvent{Event: &pb.ExecEvent_Output{Output: &pb.Output{Data: bytes.Repeat([]byte{c}, 256<<10)}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := chunk('a'), chunk('b')
	var r eventReader
	if err := r.DecodeProto(a); err != nil {
		t.Fatal(err)
	}
	first := r.ev.GetOutput().GetData()
	if err := r.DecodeProto(b); err != nil {
		t.Fatal(err)
	}
	second := r.ev.GetOutput().GetData()
	if &first[0] != &second[0] || second[0] != 'b' || len(second) != 256<<10 {
		t.Fatalf("the second chunk was not decoded into the first one's buffer")
	}
	if n := testing.AllocsPerRun(50, func() { r.DecodeProto(a) }); n != 0 {
		t.Errorf("%v allocations per output event, want 0", n)
	}
}

// chunkAgent sends three output chunks of different content, then a result.
type chunkAgent struct {
	sbxagentconnect.UnimplementedAgentHandler
	chunks [][]byte
}

func (a chunkAgent) Exec(ctx context.Context, _ *connect.Request[pb.ExecRequest], out *connect.ServerStream[pb.ExecEvent]) error {
	if err := out.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Started{Started: &pb.Started{Id: "p1", Pid: 7}}}); err != nil {
		return err
	}
	for i, c := range a.chunks {
		s := pb.Stream_STREAM_STDOUT
		if i%2 == 1 {
			s = pb.Stream_STREAM_STDERR
		}
		if err := out.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Output{Output: &pb.Output{Stream: s, Data: c}}}); err != nil {
			return err
		}
	}
	return out.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Result{Result: &pb.ExecResult{ExitCode: 0}}})
}

// TestExecStreamChunks: through a real Connect stream, each chunk reaches the
// callback whole and on its own stream, whatever buffer it was read into.
func TestExecStreamChunks(t *testing.T) {
	chunks := [][]byte{bytes.Repeat([]byte("a"), 300<<10), bytes.Repeat([]byte("b"), 1000), bytes.Repeat([]byte("c"), 70<<10)}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(sbxagentconnect.NewAgentHandler(chunkAgent{chunks: chunks}))
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	c := New("sbx1", func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	defer c.Close()
	var got [][]byte
	var streams []string
	res, err := c.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"x"}}, true, func(ev sandbox.ExecEvent) error {
		switch {
		case ev.Stdout != nil:
			got, streams = append(got, bytes.Clone(ev.Stdout)), append(streams, "stdout")
		case ev.Stderr != nil:
			got, streams = append(got, bytes.Clone(ev.Stderr)), append(streams, "stderr")
		}
		return nil
	})
	if err != nil || res == nil {
		t.Fatalf("exec: %v, %v", res, err)
	}
	if len(got) != len(chunks) {
		t.Fatalf("%d chunks, want %d", len(got), len(chunks))
	}
	for i := range chunks {
		want := "stdout"
		if i%2 == 1 {
			want = "stderr"
		}
		if !bytes.Equal(got[i], chunks[i]) || streams[i] != want {
			t.Errorf("chunk %d: %d bytes on %s, want %d bytes of %q on %s", i, len(got[i]), streams[i], len(chunks[i]), chunks[i][:1], want)
		}
	}
}
