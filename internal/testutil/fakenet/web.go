// This file implements the web servers of allowed.test, blocked.test and
// evil.test, on :80 and, with the test CA's certificate, :443.
//
// Paths (any method, any host):
//
//	/echo          the request's headers as a JSON object (Host included)
//	/big?n=N       N bytes (at most 1 GiB): byte i is i mod 256
//	/upload        reads the body, answers its SHA-256 in hex
//	/redirect?to=U 302 to U
//	/ws            WebSocket echo of every message
//	anything else  200 "hello from <host>", host being the request's host name

package fakenet

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/coder/websocket"
)

// maxBig caps /big's n.
const maxBig = 1 << 30

// hostName is the name part of a request's host, without port, brackets or
// final dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
}

// logRequest records r as kind (KindHTTP or KindMetadata).
func (n *Internet) logRequest(kind Kind, r *http.Request, detail string) {
	e := Event{
		Kind: kind, Op: "request", Name: hostName(r.Host), Method: r.Method, Path: r.RequestURI,
		Header: r.Header.Clone(), Remote: parseAddrPort(r.RemoteAddr), Detail: detail,
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		e.Local = addrPort(la)
	}
	if r.TLS != nil {
		e.TLS = true
		e.SNI = r.TLS.ServerName
	}
	n.log.add(e)
}

func (n *Internet) webHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("Host", r.Host)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(h)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		size, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || size < 0 || size > maxBig {
			http.Error(w, "n must be a byte count up to 1 GiB", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		writeBig(w, size)
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		if _, err := io.Copy(h, r.Body); err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		io.WriteString(w, hex.EncodeToString(h.Sum(nil)))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		to := r.URL.Query().Get("to")
		if to == "" {
			http.Error(w, "to is required", http.StatusBadRequest)
			return
		}
		w.Header().Set("Location", to)
		w.WriteHeader(http.StatusFound)
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return // Accept has answered
		}
		defer c.CloseNow()
		ctx := r.Context()
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, msg); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from "+hostName(r.Host))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.logRequest(KindHTTP, r, "")
		mux.ServeHTTP(w, r)
	})
}

// bigChunk is written over and over by /big: its length is a multiple of 256,
// so byte i of the stream is i mod 256.
var bigChunk = BigBody(32 << 10)

func writeBig(w io.Writer, size int64) error {
	for size > 0 {
		m := min(size, int64(len(bigChunk)))
		if _, err := w.Write(bigChunk[:m]); err != nil {
			return err
		}
		size -= m
	}
	return nil
}

// BigBody returns what /big?n=size serves, for a test to compare.
func BigBody(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// tlsConfig serves the leaf certificate and logs every ClientHello, before the
// handshake can fail.
func (n *Internet) tlsConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{n.pki.leaf},
		NextProtos:   []string{"h2", "http/1.1"},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			e := Event{Kind: KindTLS, Op: "hello", Name: strings.TrimSuffix(hello.ServerName, "."),
				Detail: "alpn=" + strings.Join(hello.SupportedProtos, ",")}
			if hello.Conn != nil {
				e.Local, e.Remote = addrPort(hello.Conn.LocalAddr()), addrPort(hello.Conn.RemoteAddr())
			}
			n.log.add(e)
			return nil, nil
		},
	}
}

func parseAddrPort(s string) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(s)
	return unmap(ap)
}

// metadataHandler is the fake cloud metadata service: AWS's IMDS (v1 GET, and
// v2's PUT token then GET with it), GCP's computeMetadata with its header, and
// 404 for the rest; every request is logged as KindMetadata.
func (n *Internet) metadataHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, body := n.metadata(r)
		n.logRequest(KindMetadata, r, strconv.Itoa(status))
		if status != http.StatusOK {
			http.Error(w, http.StatusText(status), status)
			return
		}
		io.WriteString(w, body)
	})
}

// MetadataSecret is the secret access key the fake metadata service hands out:
// a canary that must never turn up in a sandbox.
const MetadataSecret = "fakenetMetadataSecretKey0000000000000000"

// MetadataRole is the IAM role the fake metadata service lists.
const MetadataRole = "fakenet-role"

func (n *Internet) metadata(r *http.Request) (int, string) {
	path := r.URL.Path
	if path == "/latest/api/token" {
		if r.Method != http.MethodPut {
			return http.StatusMethodNotAllowed, ""
		}
		ttl, err := strconv.Atoi(r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
		if err != nil || ttl < 1 || ttl > 21600 {
			return http.StatusBadRequest, ""
		}
		return http.StatusOK, n.metadataToken
	}
	if strings.HasPrefix(path, "/computeMetadata/") {
		if r.Header.Get("Metadata-Flavor") != "Google" {
			return http.StatusForbidden, ""
		}
		if path == "/computeMetadata/v1/instance/service-accounts/default/token" {
			return http.StatusOK, `{"access_token":"` + MetadataSecret + `","expires_in":3599,"token_type":"Bearer"}`
		}
		return http.StatusOK, "fakenet\n"
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return http.StatusMethodNotAllowed, ""
	}
	if tok, ok := r.Header["X-Aws-Ec2-Metadata-Token"]; ok && (len(tok) != 1 || tok[0] != n.metadataToken) {
		return http.StatusUnauthorized, ""
	}
	switch path {
	case "/latest/meta-data/", "/latest/meta-data":
		return http.StatusOK, "ami-id\nhostname\niam/\ninstance-id\nlocal-ipv4\n"
	case "/latest/meta-data/ami-id":
		return http.StatusOK, "ami-0fa4e0e7fa4e0e7fa"
	case "/latest/meta-data/hostname":
		return http.StatusOK, "ip-198-18-1-99.fakenet.internal"
	case "/latest/meta-data/instance-id":
		return http.StatusOK, "i-0fa4e0e7fa4e0e7fa"
	case "/latest/meta-data/local-ipv4":
		return http.StatusOK, "198.18.1.99"
	case "/latest/meta-data/iam/", "/latest/meta-data/iam/security-credentials/":
		return http.StatusOK, MetadataRole
	case "/latest/meta-data/iam/security-credentials/" + MetadataRole:
		return http.StatusOK, fmt.Sprintf(`{"Code":"Success","AccessKeyId":"ASIAFAKENET000000000","SecretAccessKey":%q,"Token":"fakenet"}`, MetadataSecret)
	}
	return http.StatusNotFound, ""
}
