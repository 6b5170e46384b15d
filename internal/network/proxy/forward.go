package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// hopHeaders are a connection's own headers, never forwarded (RFC 9110
// §7.6.1), besides those the Connection header names.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func dropHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// upstream is the plain-HTTP connection a client connection's requests go
// on, kept while they go to the same place.
type upstream struct {
	dst string
	c   net.Conn
	br  *bufio.Reader
}

func (u *upstream) close() {
	if u.c != nil {
		u.c.Close()
		u.c, u.br, u.dst = nil, nil, ""
	}
}

// forward sends r, already judged, to dst over plain HTTP and copies the
// answer back. A body of known length comes back spliced from the upstream
// socket into the sandbox's (no copy through the proxy's memory: that is
// most of its cost per byte); one of unknown length is copied and flushed as
// it comes (event streams).
func (h *httpHandler) forward(w http.ResponseWriter, r *http.Request, name string, port uint16, dst string) error {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = "http", dst, r.Host
	out.Close = false
	dropHopHeaders(out.Header)
	up := &h.up
	if up.c == nil || up.dst != dst {
		up.close()
		c, _, err := h.k.p.dial(r.Context(), h.k.policy(), name, port)
		if err != nil {
			return err
		}
		up.c, up.br, up.dst = c, bufio.NewReaderSize(c, 64<<10), dst
	}
	if err := out.Write(up.c); err != nil {
		up.close()
		return err
	}
	resp, err := http.ReadResponse(up.br, out)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 {
		resp, err = http.ReadResponse(up.br, out) // interim answers: not passed on
	}
	if err != nil {
		up.close()
		return err
	}
	// resp.Body is not closed: a body of known length is read past it,
	// straight from the socket, and its Close would wait for bytes already
	// taken; one of unknown length is read to its end.
	dropHopHeaders(resp.Header)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	n := resp.ContentLength
	if n >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(n))
	}
	w.WriteHeader(resp.StatusCode)
	if r.Method == http.MethodHead || n == 0 || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		h.keepOrClose(resp)
		return nil
	}
	if n < 0 {
		// Unknown length (chunked, or until close): copied and flushed as
		// it comes.
		buf := make([]byte, 32<<10)
		f, _ := w.(http.Flusher)
		for {
			k, rerr := resp.Body.Read(buf)
			if k > 0 {
				if _, werr := w.Write(buf[:k]); werr != nil {
					up.close()
					return nil // the sandbox went away
				}
				if f != nil {
					f.Flush()
				}
			}
			if rerr == io.EOF {
				h.keepOrClose(resp)
				return nil
			}
			if rerr != nil {
				up.close()
				return nil // the answer is under way: nothing else to say
			}
		}
	}
	// Known length: what the reader holds already, then straight from the
	// socket (http's ResponseWriter hands a TCP source to the sandbox's
	// connection's ReadFrom: splice).
	left := n
	if b := int64(up.br.Buffered()); b > 0 {
		k, err := io.CopyN(w, up.br, min(b, left))
		left -= k
		if err != nil {
			up.close()
			return nil
		}
	}
	if left > 0 {
		k, _ := io.Copy(w, io.LimitReader(up.c, left))
		left -= k
	}
	if left != 0 {
		up.close() // cut short: the sandbox sees a short body, as from the upstream
		return nil
	}
	h.keepOrClose(resp)
	return nil
}

// keepOrClose keeps the upstream connection for the next request unless
// the answer ends it.
func (h *httpHandler) keepOrClose(resp *http.Response) {
	if resp.Close || resp.ProtoMajor < 1 || (resp.ProtoMajor == 1 && resp.ProtoMinor == 0) {
		h.up.close()
	}
}
