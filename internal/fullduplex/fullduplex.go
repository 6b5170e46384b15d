// Package fullduplex serves an HTTP request whose answer may begin before
// its body has been read to the end, as a proxy forwarding a stream does. It
// knows nothing of what is forwarded.
package fullduplex

import "net/http"

// Serve serves r with h, full duplex: net/http's HTTP/1 server otherwise
// drains and closes a request's unread body as soon as the answer begins,
// while a transport forwarding that body still reads it. An upstream that
// answers a stream on the request's first bytes (an agent's start event)
// then has its connection cut under the answer, once the transport's next
// read of the closed body fails.
//
// Serve closes r's body when h returns: a body left unread to the end (the
// upstream failed or never read it) would otherwise be drained by the
// server after the handler, with full duplex on, which starts the
// connection's background read once its pending read was already stopped,
// and the next request on the connection panics the server's goroutine
// ("invalid concurrent Body.Read call", golang/go#68560). Not when h panics
// (a proxy's http.ErrAbortHandler): the server then drops the connection
// and reads nothing more from it, and neither does Serve.
func Serve(h http.Handler, w http.ResponseWriter, r *http.Request) {
	http.NewResponseController(w).EnableFullDuplex() // HTTP/2: always full duplex
	h.ServeHTTP(w, r)
	if r.Body != nil {
		r.Body.Close()
	}
}
