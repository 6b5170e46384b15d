// This file implements envd's filesystem.Filesystem over the agent's tree.

package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "sbx.dev/sbx/api/agent/filesystem"
	"sbx.dev/sbx/internal/agent/files"
)

type envdFS struct{ s *Server }

func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func fileType(t string) pb.FileType {
	switch t {
	case "file":
		return pb.FileType_FILE_TYPE_FILE
	case "dir":
		return pb.FileType_FILE_TYPE_DIRECTORY
	}
	return pb.FileType_FILE_TYPE_UNSPECIFIED
}

// entry renders an Info as envd does, with a regular file's metadata.
func (e envdFS) entry(in files.Info) *pb.EntryInfo {
	out := entry(in)
	if in.Type == "file" {
		out.Metadata = e.s.fs.Metadata(in.Path)
	}
	return out
}

// entry renders an Info as envd does: for a symlink, type and mode are the
// target's and symlink_target is set; permissions are the entry's own.
func entry(in files.Info) *pb.EntryInfo {
	e := &pb.EntryInfo{Name: validUTF8(in.Name), Path: validUTF8(in.Path), Type: fileType(in.TargetType), Size: in.Size,
		Mode: uint32(in.TargetMode.Perm()), Permissions: in.Mode.String(), Owner: in.Owner, Group: in.Group,
		ModifiedTime: timestamppb.New(in.ModTime)}
	if in.Type == "symlink" {
		t := validUTF8(in.SymlinkTarget)
		e.SymlinkTarget = &t
	}
	return e
}

func (e envdFS) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	in, err := e.s.fs.Stat(req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e.entry(in)}), nil
}

func (e envdFS) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	in, err := e.s.fs.MakeDir(req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: entry(in)}), nil
}

func (e envdFS) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	in, err := e.s.fs.Move(req.Msg.GetSource(), req.Msg.GetDestination())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e.entry(in)}), nil
}

func (e envdFS) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	ins, err := e.s.fs.List(req.Msg.GetPath(), int(req.Msg.GetDepth()))
	if err != nil {
		return nil, toConnect(err)
	}
	resp := &pb.ListDirResponse{Entries: make([]*pb.EntryInfo, 0, len(ins))}
	for _, in := range ins {
		resp.Entries = append(resp.Entries, e.entry(in))
	}
	return connect.NewResponse(resp), nil
}

func (e envdFS) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	if err := e.s.fs.Remove(req.Msg.GetPath()); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

func eventType(op string) pb.EventType {
	switch op {
	case "create":
		return pb.EventType_EVENT_TYPE_CREATE
	case "write":
		return pb.EventType_EVENT_TYPE_WRITE
	case "remove":
		return pb.EventType_EVENT_TYPE_REMOVE
	case "rename":
		return pb.EventType_EVENT_TYPE_RENAME
	case "chmod":
		return pb.EventType_EVENT_TYPE_CHMOD
	}
	return pb.EventType_EVENT_TYPE_UNSPECIFIED
}

func (e envdFS) event(ev files.WatchEvent, includeEntry bool) *pb.FilesystemEvent {
	fe := &pb.FilesystemEvent{Name: validUTF8(ev.Name), Type: eventType(ev.Op)}
	if includeEntry && (ev.Op == "create" || ev.Op == "write" || ev.Op == "chmod") {
		if in, err := e.s.fs.Stat(ev.Path); err == nil {
			fe.Entry = e.entry(in)
		}
	}
	return fe
}

func (e envdFS) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	m := req.Msg
	w, err := e.s.fs.Watch(m.GetPath(), m.GetRecursive(), m.GetAllowNetworkMounts())
	if err != nil {
		return toConnect(err)
	}
	defer w.Close()
	stop := context.AfterFunc(ctx, func() { w.Close() })
	defer stop()
	var mu sync.Mutex // stream.Send from the reader and the keepalive timer
	send := func(r *pb.WatchDirResponse) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(r)
	}
	if err := send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	interval := keepaliveInterval(req.Header(), envdKeepalive)
	var ka *time.Timer
	ka = time.AfterFunc(interval, func() {
		if send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}) == nil {
			ka.Reset(interval)
		}
	})
	defer ka.Stop()
	for {
		evs, err := w.Next()
		if err != nil {
			return nil // closed: the client went away or the deadline passed
		}
		for _, ev := range evs {
			if err := send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: e.event(ev, m.GetIncludeEntry())}}); err != nil {
				return err
			}
		}
		ka.Reset(interval)
	}
}

// watchers holds the non-streaming watchers.
type watchers struct {
	mu sync.Mutex
	m  map[string]*watcher // guarded by mu
}

type watcher struct {
	w            *files.Watcher
	includeEntry bool
	mu           sync.Mutex
	events       []*pb.FilesystemEvent // guarded by mu; at most maxWatcherEvents
	lost         bool
}

const (
	maxWatchers      = 64
	maxWatcherEvents = 10000
)

func (ws *watchers) closeAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for id, w := range ws.m {
		w.w.Close()
		delete(ws.m, id)
	}
}

func (e envdFS) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	m := req.Msg
	ws := &e.s.watches
	ws.mu.Lock()
	n := len(ws.m)
	ws.mu.Unlock()
	if n >= maxWatchers {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("at most %d watchers", maxWatchers))
	}
	fw, err := e.s.fs.Watch(m.GetPath(), m.GetRecursive(), m.GetAllowNetworkMounts())
	if err != nil {
		return nil, toConnect(err)
	}
	var b [8]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	w := &watcher{w: fw, includeEntry: m.GetIncludeEntry()}
	ws.mu.Lock()
	ws.m[id] = w
	ws.mu.Unlock()
	go func() { // ends when RemoveWatcher closes the watch
		for {
			evs, err := fw.Next()
			if err != nil {
				return
			}
			for _, ev := range evs {
				fe := e.event(ev, w.includeEntry)
				w.mu.Lock()
				if len(w.events) < maxWatcherEvents {
					w.events = append(w.events, fe)
				} else {
					w.lost = true
				}
				w.mu.Unlock()
			}
		}
	}()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

func (e envdFS) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	ws := &e.s.watches
	ws.mu.Lock()
	w, ok := ws.m[req.Msg.GetWatcherId()]
	ws.mu.Unlock()
	if !ok {
		return nil, toConnect(errNotFound("watcher %s", req.Msg.GetWatcherId()))
	}
	w.mu.Lock()
	evs := w.events
	w.events = nil
	w.mu.Unlock()
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: evs}), nil
}

func (e envdFS) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	ws := &e.s.watches
	ws.mu.Lock()
	w, ok := ws.m[req.Msg.GetWatcherId()]
	delete(ws.m, req.Msg.GetWatcherId())
	ws.mu.Unlock()
	if !ok {
		return nil, toConnect(errNotFound("watcher %s", req.Msg.GetWatcherId()))
	}
	w.w.Close()
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}
