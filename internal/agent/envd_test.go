package agent_test

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"sbx.dev/sbx/api/agent/boot"
	fspb "sbx.dev/sbx/api/agent/filesystem"
	"sbx.dev/sbx/api/agent/filesystem/filesystemconnect"
	pb "sbx.dev/sbx/api/agent/process"
	"sbx.dev/sbx/api/agent/process/processconnect"
)

// envdClients are raw Connect clients speaking JSON, as E2B's SDK does.
func (a *testAgent) envd(t *testing.T) (processconnect.ProcessClient, filesystemconnect.FilesystemClient, *http.Client) {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return a.dial(ctx) }}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	return processconnect.NewProcessClient(hc, "http://agent", connect.WithProtoJSON()),
		filesystemconnect.NewFilesystemClient(hc, "http://agent", connect.WithProtoJSON()), hc
}

// collect reads a Start or Connect stream to its end.
func collect(t *testing.T, recv func() bool, msg func() *pb.ProcessEvent, errf func() error) (events []*pb.ProcessEvent) {
	t.Helper()
	for recv() {
		events = append(events, msg())
	}
	if err := errf(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return events
}

func checkShape(t *testing.T, events []*pb.ProcessEvent) (stdout, stderr string, end *pb.ProcessEvent_EndEvent) {
	t.Helper()
	if len(events) == 0 || events[0].GetStart() == nil {
		t.Fatalf("first event = %v, want start", events)
	}
	ends := 0
	for i, ev := range events {
		switch {
		case ev.GetData() != nil:
			stdout += string(ev.GetData().GetStdout()) + string(ev.GetData().GetPty())
			stderr += string(ev.GetData().GetStderr())
		case ev.GetEnd() != nil:
			ends++
			end = ev.GetEnd()
			if i != len(events)-1 {
				t.Errorf("end event is not last")
			}
		case ev.GetStart() != nil && i > 0:
			t.Errorf("second start event")
		}
	}
	if ends != 1 {
		t.Fatalf("%d end events, want exactly 1", ends)
	}
	return stdout, stderr, end
}

func TestEnvdStart(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	proc, _, _ := a.envd(t)
	f := false
	st, err := proc.Start(t.Context(), connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo out; echo err >&2; exit 2"}}, Stdin: &f}))
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, st.Receive, func() *pb.ProcessEvent { return st.Msg().GetEvent() }, st.Err)
	stdout, stderr, end := checkShape(t, events)
	if stdout != "out\n" || stderr != "err\n" {
		t.Errorf("stdout %q stderr %q", stdout, stderr)
	}
	if end.GetExitCode() != 2 || !end.GetExited() || end.GetStatus() != "exit status 2" || end.GetError() != "exit status 2" {
		t.Errorf("end = %v", end)
	}
}

func TestEnvdTimeoutIsLifetime(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	proc, _, _ := a.envd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	st, err := proc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"100"}}}))
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	for st.Receive() {
		if s := st.Msg().GetEvent().GetStart(); s != nil {
			pid = s.GetPid()
		}
	}
	// The client gives up at its deadline; the process is killed by the agent.
	a2, _, _ := a.envd(t)
	cst, err := a2.Connect(t.Context(), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}}))
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, cst.Receive, func() *pb.ProcessEvent { return cst.Msg().GetEvent() }, cst.Err)
	_, _, end := checkShape(t, events)
	if end.GetExited() || end.GetStatus() != "signal: killed" || end.GetExitCode() != -1 {
		t.Errorf("end = %v, want killed by signal", end)
	}
}

func TestEnvdBackgroundProcess(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	proc, _, _ := a.envd(t)
	tag := "job"
	ctx, cancel := context.WithCancel(t.Context())
	st, err := proc.Start(ctx, connect.NewRequest(&pb.StartRequest{Tag: &tag,
		Process: &pb.ProcessConfig{Cmd: "cat", Envs: map[string]string{"A": "b"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", st.Err())
	}
	pid := st.Msg().GetEvent().GetStart().GetPid()
	cancel() // the client goes away: the process stays
	st.Close()

	list, err := proc.List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil || len(list.Msg.GetProcesses()) != 1 || list.Msg.GetProcesses()[0].GetPid() != pid ||
		list.Msg.GetProcesses()[0].GetTag() != "job" || list.Msg.GetProcesses()[0].GetConfig().GetEnvs()["A"] != "b" {
		t.Fatalf("List = %v, %v", list.Msg, err)
	}
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	cst, err := proc.Connect(t.Context(), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "job"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if !cst.Receive() || cst.Msg().GetEvent().GetStart().GetPid() != pid {
		t.Fatalf("Connect: first event %v, %v", cst.Msg(), cst.Err())
	}
	if _, err := proc.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel,
		Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("hello\n")}}})); err != nil {
		t.Fatal(err)
	}
	var got string
	for !strings.Contains(got, "hello\n") && cst.Receive() {
		got += string(cst.Msg().GetEvent().GetData().GetStdout())
	}
	if _, err := proc.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	var end *pb.ProcessEvent_EndEvent
	for cst.Receive() {
		if e := cst.Msg().GetEvent().GetEnd(); e != nil {
			end = e
		}
	}
	if end == nil || end.GetExitCode() != 0 {
		t.Errorf("end after CloseStdin = %v (%v)", end, cst.Err())
	}
	_, err = proc.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel,
		Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}))
	if connect.CodeOf(err) != connect.CodeInternal {
		t.Errorf("SendInput after exit = %v, want internal", err)
	}
	_, err = proc.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 999999}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("SendSignal(unknown pid) = %v, want not_found", err)
	}
	_, err = proc.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: sel}))
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("SendSignal(unspecified) = %v, want unimplemented", err)
	}
	// Connect to an unknown pid ends the stream with not_found.
	ust, _ := proc.Connect(t.Context(), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 999999}}}))
	for ust.Receive() {
	}
	if connect.CodeOf(ust.Err()) != connect.CodeNotFound {
		t.Errorf("Connect(unknown) = %v, want not_found", ust.Err())
	}
}

func TestEnvdPTYAndKill(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	proc, _, _ := a.envd(t)
	st, err := proc.Start(t.Context(), connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "stty size; read x; echo got:$x; sleep 1000"}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 91, Rows: 17}}}))
	if err != nil {
		t.Fatal(err)
	}
	st.Receive()
	pid := st.Msg().GetEvent().GetStart().GetPid()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	var out string
	for !strings.Contains(out, "17 91") && st.Receive() {
		out += string(st.Msg().GetEvent().GetData().GetPty())
	}
	if _, err := proc.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel,
		Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("zz\n")}}})); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(out, "got:zz") && st.Receive() {
		out += string(st.Msg().GetEvent().GetData().GetPty())
	}
	if _, err := proc.Update(t.Context(), connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 10, Rows: 5}}})); err != nil {
		t.Errorf("Update = %v", err)
	}
	if _, err := proc.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	var end *pb.ProcessEvent_EndEvent
	for st.Receive() {
		if e := st.Msg().GetEvent().GetEnd(); e != nil {
			end = e
		}
	}
	if end == nil || end.GetStatus() != "signal: killed" || !strings.Contains(out, "got:zz") {
		t.Errorf("end = %v, output %q", end, out)
	}
	// Killed once, it is gone: E2B's SDK reads not_found as kill() false.
	if _, err := proc.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("SendSignal(exited pid) = %v, want not_found", err)
	}
}

func TestEnvdFilesystem(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	_, fsc, hc := a.envd(t)
	ctx := t.Context()
	mk, err := fsc.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/a/b"}))
	if err != nil || mk.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_DIRECTORY || mk.Msg.GetEntry().GetPath() != "/a/b" {
		t.Fatalf("MakeDir = %v, %v", mk, err)
	}
	if _, err := fsc.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/a/b"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("MakeDir(existing) = %v, want already_exists", err)
	}
	os.WriteFile(filepath.Join(a.root, "a/b/f.txt"), []byte("hello"), 0o640)
	os.Symlink("b/f.txt", filepath.Join(a.root, "a/link"))
	st, err := fsc.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "a/b/f.txt"}))
	if e := st.Msg.GetEntry(); err != nil || e.GetSize() != 5 || e.GetMode() != 0o640 || e.GetPermissions() != "-rw-r-----" || e.GetOwner() != "root" || e.GetName() != "f.txt" {
		t.Errorf("Stat = %v, %v", st, err)
	}
	st, err = fsc.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/a/link"}))
	if e := st.Msg.GetEntry(); err != nil || e.GetType() != fspb.FileType_FILE_TYPE_FILE || e.GetSymlinkTarget() != "/a/b/f.txt" || !strings.HasPrefix(e.GetPermissions(), "L") {
		t.Errorf("Stat(symlink) = %v, %v", st, err)
	}
	if _, err := fsc.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Stat(missing) = %v, want not_found", err)
	}
	ls, err := fsc.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/a"}))
	if err != nil || len(ls.Msg.GetEntries()) != 2 {
		t.Errorf("ListDir(depth 0) = %v, %v; want b and link", ls, err)
	}
	ls, err = fsc.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/a", Depth: 2}))
	if err != nil || len(ls.Msg.GetEntries()) != 3 {
		t.Errorf("ListDir(depth 2) = %v, %v", ls, err)
	}
	if _, err := fsc.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/a/b/f.txt"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("ListDir(file) = %v, want invalid_argument", err)
	}
	mv, err := fsc.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "/a/b/f.txt", Destination: "/c/g.txt"}))
	if err != nil || mv.Msg.GetEntry().GetPath() != "/c/g.txt" {
		t.Errorf("Move = %v, %v", mv, err)
	}
	if _, err := fsc.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "/nope", Destination: "/x"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Move(missing) = %v, want not_found", err)
	}
	if _, err := fsc.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/a"})); err != nil {
		t.Errorf("Remove = %v", err)
	}
	if _, err := fsc.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/a"})); err != nil {
		t.Errorf("Remove(missing) = %v, want success", err)
	}

	// HTTP /files: multipart with the full filename, raw upload, download.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	pw, _ := mw.CreateFormFile("file", "/up/dir/one.txt")
	pw.Write([]byte("one"))
	pw, _ = mw.CreateFormFile("file", "/up/two.txt")
	pw.Write([]byte("two"))
	mw.Close()
	resp, err := hc.Post("http://agent/files", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `[{"path":"/up/dir/one.txt","name":"one.txt","type":"file"},{"path":"/up/two.txt","name":"two.txt","type":"file"}]`+"\n" {
		t.Errorf("POST /files multipart = %d %s", resp.StatusCode, b)
	}
	resp, err = hc.Post("http://agent/files?path="+url.QueryEscape("/raw/r.bin"), "application/octet-stream", strings.NewReader("raw"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, _ := os.ReadFile(filepath.Join(a.root, "raw/r.bin")); resp.StatusCode != 200 || string(got) != "raw" {
		t.Errorf("POST /files raw = %d, file %q", resp.StatusCode, got)
	}
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/up/two.txt", 200, "two"},
		{"/up/none", 404, `{"code":404,"message":"path '/up/none' does not exist"}` + "\n"},
		{"/up", 400, `{"code":400,"message":"path '/up' is a directory"}` + "\n"},
	} {
		resp, err := hc.Get("http://agent/files?path=" + url.QueryEscape(tc.path))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || string(b) != tc.body {
			t.Errorf("GET /files?path=%s = %d %q, want %d %q", tc.path, resp.StatusCode, b, tc.status, tc.body)
		}
	}
	resp, err = hc.Get("http://agent/health")
	if err != nil || resp.StatusCode != 204 {
		t.Errorf("GET /health = %v, %v", resp, err)
	}
}

func TestEnvdWatchDir(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	_, fsc, _ := a.envd(t)
	os.Mkdir(filepath.Join(a.root, "w"), 0o755)
	os.Mkdir(filepath.Join(a.root, "w/sub"), 0o755)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st, err := fsc.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: "/w", Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetStart() == nil {
		t.Fatalf("first message = %v, %v; want start", st.Msg(), st.Err())
	}
	os.WriteFile(filepath.Join(a.root, "w/sub/new.txt"), []byte("x"), 0o644)
	if !st.Receive() {
		t.Fatal(st.Err())
	}
	ev := st.Msg().GetFilesystem()
	if ev.GetName() != "sub/new.txt" || ev.GetType() != fspb.EventType_EVENT_TYPE_CREATE || ev.GetEntry().GetPath() != "/w/sub/new.txt" {
		t.Errorf("event = %v", ev)
	}
	cancel()
	for st.Receive() {
	}
	mst, _ := fsc.WatchDir(t.Context(), connect.NewRequest(&fspb.WatchDirRequest{Path: "/nope"}))
	for mst.Receive() {
	}
	if connect.CodeOf(mst.Err()) != connect.CodeNotFound {
		t.Errorf("WatchDir(missing) = %v, want not_found", mst.Err())
	}
}

// E2B's file metadata: X-Metadata-<key> headers on an upload come back with
// the file's entry (the upload's answer, Stat, ListDir), and go with it when
// it moves; bad keys are refused before anything is written.
func TestEnvdFileMetadata(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	_, fsc, hc := a.envd(t)
	ctx := t.Context()
	upload := func(path string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://agent/files?path="+url.QueryEscape(path), strings.NewReader("x"))
		req.Header.Set("Content-Type", "application/octet-stream")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	st, body := upload("/m/a.txt", "X-Metadata-Owner", "me", "X-Metadata-Build.Id", "42")
	if st != 200 || !strings.Contains(body, `"metadata":{"build.id":"42","owner":"me"}`) {
		t.Fatalf("upload with metadata = %d %s", st, body)
	}
	if st, body := upload("/m/plain.txt"); st != 200 || strings.Contains(body, "metadata") {
		t.Errorf("upload without metadata = %d %s", st, body)
	}
	s, err := fsc.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/m/a.txt"}))
	if md := s.Msg.GetEntry().GetMetadata(); err != nil || len(md) != 2 || md["owner"] != "me" || md["build.id"] != "42" {
		t.Errorf("Stat's metadata = %v, %v", md, err)
	}
	if _, err := fsc.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "/m/a.txt", Destination: "/m/b.txt"})); err != nil {
		t.Fatal(err)
	}
	ls, err := fsc.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/m"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ls.Msg.GetEntries() {
		switch e.GetName() {
		case "b.txt":
			if e.GetMetadata()["owner"] != "me" {
				t.Errorf("the moved file's metadata = %v", e.GetMetadata())
			}
		case "plain.txt":
			if len(e.GetMetadata()) != 0 {
				t.Errorf("a file without metadata lists %v", e.GetMetadata())
			}
		}
	}
	// Uploading again replaces the metadata: keys not sent go.
	if st, body := upload("/m/b.txt", "X-Metadata-Owner", "you"); st != 200 || !strings.Contains(body, `"metadata":{"owner":"you"}`) {
		t.Errorf("second upload = %d %s", st, body)
	}
	s, err = fsc.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/m/b.txt"}))
	if md := s.Msg.GetEntry().GetMetadata(); err != nil || len(md) != 1 || md["owner"] != "you" {
		t.Errorf("metadata after a second upload = %v, %v", md, err)
	}
	for _, bad := range [][]string{{"X-Metadata-K", "caf\u00e9"}, {"X-Metadata-K", strings.Repeat("v", 5000)}} {
		if st, body := upload("/m/refused.txt", bad...); st != 400 || !strings.Contains(body, "file metadata") {
			t.Errorf("upload with %q = %d %s, want 400", bad[0], st, body)
		}
	}
	if _, err := os.Stat(filepath.Join(a.root, "m/refused.txt")); !os.IsNotExist(err) {
		t.Errorf("a refused upload wrote its file: %v", err)
	}
}
