package httpapi

import (
	"errors"
	"testing"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

// FuzzDecode feeds request bodies through the decoder and the conversions of
// every JSON route: any input yields a value or an ErrInvalid, never a panic.
// The corpus in testdata/fuzz/FuzzDecode runs on every go test.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"timeout":60,"memory_mb":256,"cpus":0.5,"labels":{"a":"b"}}`,
		`{"command":"echo hi","timeout":0}`, `{"argv":["a",""],"stdin_base64":"AAEC"}`,
		`{"path":"/a","content":"x","mode":"0755"}`, `{"signal":"SIGKILL"}`, `{"a":{"b":[1,{"c":[]}]}}`,
		`{"timeout":1e400}`, `{"x":"\ud800"}`, `[`, `{"a":1,"a":2}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(err error) {
			if err != nil && !errors.Is(err, sandbox.ErrInvalid) {
				t.Fatalf("decoding %q: %v is not an ErrInvalid", body, err)
			}
		}
		var c openapi.CreateSandboxRequest
		if err := decodeBody(body, &c); err == nil {
			_, err = createRequest(c)
			check(err)
		} else {
			check(err)
		}
		var x openapi.ExecRequest
		if err := decodeBody(body, &x); err == nil {
			_, err = execRequest(x)
			check(err)
		} else {
			check(err)
		}
		var w openapi.WriteFileRequest
		if err := decodeBody(body, &w); err == nil {
			_, err = textOrBase64("content", w.Content, w.ContentBase64)
			check(err)
			_, err = parseMode("mode", w.Mode)
			check(err)
		} else {
			check(err)
		}
		var s openapi.SignalRequest
		if err := decodeBody(body, &s); err == nil {
			_, err = parseSignal(s.Signal)
			check(err)
		} else {
			check(err)
		}
	})
}
