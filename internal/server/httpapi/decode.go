// This file implements request decoding: bounded JSON bodies checked before
// decoding (size, UTF-8, nesting, duplicate keys), errors that name the field,
// and query parameters.

package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"sbx.dev/sbx/internal/sandbox"
)

// maxDepth bounds the nesting of a JSON body; no request of the API nests
// deeper than 3.
const maxDepth = 32

// decodeJSON decodes r's body, at most s.maxBody bytes, into v. An empty body
// decodes as {}. Unknown fields are ignored; a wrong type is an ErrInvalid
// naming the field.
func (s *server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength > s.maxBody {
		return fmt.Errorf("%w: request body: %d bytes is over the limit of %d", sandbox.ErrTooLarge, r.ContentLength, s.maxBody)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: request body: over the limit of %d bytes", sandbox.ErrTooLarge, s.maxBody)
		}
		return fmt.Errorf("%w: reading request body: %v", sandbox.ErrInvalid, err)
	}
	return decodeBody(body, v)
}

// decodeBody is decodeJSON on bytes already read; the fuzz test calls it.
func decodeBody(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if !utf8.Valid(body) {
		return sandbox.Invalid("body", "not valid UTF-8")
	}
	if err := checkShape(body); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return jsonError(err)
	}
	return nil
}

// checkShape walks body's tokens: it must be one object, nested at most
// maxDepth deep, without a key twice in one object (parsers disagree on which
// of two wins, so neither does).
func checkShape(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		keys     map[string]bool
		isObject bool
		wantKey  bool
	}
	var stack []frame
	first := true
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return jsonError(err)
		}
		if first {
			if d, ok := tok.(json.Delim); !ok || d != '{' {
				return sandbox.Invalid("body", "must be a JSON object")
			}
			first = false
		} else if len(stack) == 0 {
			return sandbox.Invalid("body", "has data after the JSON object")
		}
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if top != nil && top.isObject {
					top.wantKey = true
				}
				if len(stack) >= maxDepth {
					return sandbox.Invalid("body", "nested deeper than %d levels", maxDepth)
				}
				stack = append(stack, frame{isObject: t == '{', wantKey: t == '{'})
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.isObject && top.wantKey {
				if top.keys == nil {
					top.keys = map[string]bool{}
				}
				if top.keys[t] {
					return sandbox.Invalid(truncate(t, 80), "appears twice in one object")
				}
				top.keys[t] = true
				top.wantKey = false
				continue
			}
			if top != nil && top.isObject {
				top.wantKey = true
			}
		default:
			if top != nil && top.isObject {
				top.wantKey = true
			}
		}
	}
	return nil
}

// jsonError turns a decoding error into an ErrInvalid naming the field.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "body"
		}
		return sandbox.Invalid(field, "expected %s, got %s", jsonType(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return sandbox.Invalid("body", "invalid JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return sandbox.Invalid("body", "JSON ends early")
	}
	return sandbox.Invalid("body", "%v", err)
}

func jsonType(kind string) string {
	switch kind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return kind
}

// query reads URL query parameters, recording the first problem.
type query struct {
	v   map[string][]string
	err error
}

func newQuery(r *http.Request) *query { return &query{v: r.URL.Query()} }

func (q *query) fail(name, format string, args ...any) {
	if q.err == nil {
		q.err = sandbox.Invalid(name, format, args...)
	}
}

// str returns parameter name; required ones must be present and non-empty.
func (q *query) str(name string, required bool) string {
	vs := q.v[name]
	if len(vs) > 1 {
		q.fail(name, "given %d times", len(vs))
		return ""
	}
	s := ""
	if len(vs) == 1 {
		s = vs[0]
	}
	if required && s == "" {
		q.fail(name, "is required")
	}
	if strings.IndexByte(s, 0) >= 0 {
		q.fail(name, "contains a NUL byte")
	}
	return s
}

// path is str for a path in the sandbox.
func (q *query) path(name string, required bool) string { return q.str(name, required) }

func (q *query) int(name string, def, min, max int64) int64 {
	s := q.str(name, false)
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		q.fail(name, "%q is not an integer", truncate(s, 40))
		return def
	}
	if n < min || n > max {
		q.fail(name, "%d is outside [%d, %d]", n, min, max)
		return def
	}
	return n
}

func (q *query) bool(name string) bool {
	s := q.str(name, false)
	if s == "" {
		return false
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		q.fail(name, "%q is not true or false", truncate(s, 40))
	}
	return b
}

// checkPath validates a path given in a JSON body.
func checkPath(field, p string, required bool) error {
	if required && p == "" {
		return sandbox.Invalid(field, "is required")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return sandbox.Invalid(field, "contains a NUL byte")
	}
	return nil
}

// textOrBase64 returns the bytes of a text field or its _base64 sibling; at
// most one may be given.
func textOrBase64(field string, text, b64 *string) ([]byte, error) {
	switch {
	case text != nil && b64 != nil:
		return nil, sandbox.Invalid(field, "give %s or %s_base64, not both", field, field)
	case b64 != nil:
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, sandbox.Invalid(field+"_base64", "not valid base64: %v", err)
		}
		return b, nil
	case text != nil:
		return []byte(*text), nil
	}
	return nil, nil
}

// parseMode reads a permission mode: an octal string ("0644", "755") or a JSON
// number taken as the value itself (420). Empty means 0: the default.
func parseMode(field string, raw []byte) (uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var n uint64
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, sandbox.Invalid(field, "not a string or number")
		}
		return parseOctalMode(field, s)
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, sandbox.Invalid(field, "expected an octal string (\"0644\") or an integer")
	}
	if n > 0o7777 {
		return 0, sandbox.Invalid(field, "%#o has bits beyond 07777", n)
	}
	return uint32(n), nil
}

func parseOctalMode(field, s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(s, "0o"), 8, 32)
	if err != nil {
		return 0, sandbox.Invalid(field, "%q is not an octal mode like \"0644\"", truncate(s, 20))
	}
	if n > 0o7777 {
		return 0, sandbox.Invalid(field, "%#o has bits beyond 07777", n)
	}
	return uint32(n), nil
}
