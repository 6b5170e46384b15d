package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/tools"
)

// The tool routes of openapi.json are made from the tool set: each tool's
// path, with its input and output schemas as the request and response
// bodies. TestToolsInOpenAPI fails when the document and the set differ;
// SBX_UPDATE_OPENAPI=1 rewrites those paths (and only those) in place.
const openapiFile = "../../../api/openapi/openapi.json"

func TestToolsInOpenAPI(t *testing.T) {
	doc, err := decodeOrdered(openapi.Document)
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	paths := doc.get("paths").(*ordered)
	want := toolPaths(tools.New(nil, tools.Options{}))
	if os.Getenv("SBX_UPDATE_OPENAPI") == "1" {
		for _, kv := range want.kvs {
			paths.set(kv.k, kv.v)
		}
		for _, k := range paths.keys() { // tools no longer in the set
			if strings.Contains(k, "/tools/") && want.get(k) == nil {
				paths.del(k)
			}
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(openapiFile, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the tool paths of %s", openapiFile)
		return
	}
	for _, kv := range want.kvs {
		got := paths.get(kv.k)
		if got == nil {
			t.Errorf("openapi.json has no path %s (run SBX_UPDATE_OPENAPI=1 go test -run TestToolsInOpenAPI ./internal/server/httpapi/)", kv.k)
			continue
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(kv.v)
		if !bytes.Equal(g, w) {
			t.Errorf("openapi.json path %s differs from the tool set (run SBX_UPDATE_OPENAPI=1 go test -run TestToolsInOpenAPI ./internal/server/httpapi/)", kv.k)
		}
	}
	for _, k := range paths.keys() {
		if strings.Contains(k, "/tools/") && want.get(k) == nil {
			t.Errorf("openapi.json documents %s, which is no tool", k)
		}
	}
}

// toolPaths returns the document's path items for the tool routes.
func toolPaths(set *tools.Set) *ordered {
	errs := func(codes ...string) *ordered {
		o := &ordered{}
		for _, c := range codes {
			o.set(c, obj("$ref", "#/components/responses/Error"))
		}
		return o
	}
	jsonBody := func(schema any) *ordered {
		return obj("application/json", obj("schema", schema))
	}
	out := &ordered{}
	list := obj("get", obj(
		"operationId", "list_tools",
		"summary", "List the agent tools",
		"description", "Every tool with its description, the capability a key needs for it, and the JSON Schemas of its arguments and result. The same tools are served over MCP at /mcp.",
		"responses", merge(obj("200", obj("description", "OK", "content", jsonBody(obj("$ref", "#/components/schemas/ToolList")))), errs("401", "500")),
		"tags", []any{"tools"},
	))
	out.set("/v1/tools", list)
	for _, t := range set.List() {
		desc := t.Description + fmt.Sprintf("\n\nThe API key needs the capability `%s`. The body is the tool's arguments; a `sandbox_id` in it, if any, must be the path's.", t.Capability)
		out.set("/v1/sandboxes/{id}/tools/"+t.Name, obj(
			"parameters", []any{obj("$ref", "#/components/parameters/SandboxID")},
			"post", obj(
				"operationId", "tool_"+strings.ReplaceAll(t.Name, ".", "_"),
				"summary", t.Title,
				"description", desc,
				"requestBody", obj("required", true, "content", jsonBody(rawOrdered(t.Input))),
				"responses", merge(obj("200", obj("description", "The tool's result", "content", jsonBody(rawOrdered(t.Output)))),
					errs("400", "401", "403", "404", "409", "429", "500", "502", "504")),
				"tags", []any{"tools"},
			)))
	}
	var names []any
	for _, t := range set.List() {
		names = append(names, t.Name)
	}
	out.set("/v1/sandboxes/{id}/tools/{name}", obj(
		"parameters", []any{obj("$ref", "#/components/parameters/SandboxID"),
			obj("name", "name", "in", "path", "required", true, "description", "The tool's name; the routes above document each one.",
				"schema", obj("type", "string", "enum", names))},
		"post", obj(
			"operationId", "call_tool",
			"summary", "Call an agent tool by name",
			"description", "Calls tool {name} with the body as its arguments. An unknown name is a 404 naming it and listing the tools.",
			"requestBody", obj("required", true, "content", jsonBody(obj("type", "object"))),
			"responses", merge(obj("200", obj("description", "The tool's result (the tool's output schema)", "content", jsonBody(obj("type", "object")))),
				errs("400", "401", "403", "404", "409", "429", "500", "502", "504")),
			"tags", []any{"tools"},
		)))
	return out
}

// ordered is a JSON object that keeps its keys' order, so that the document
// is rewritten with only the tool paths changed.
type ordered struct{ kvs []kv }

type kv struct {
	k string
	v any
}

func obj(pairs ...any) *ordered {
	o := &ordered{}
	for i := 0; i < len(pairs); i += 2 {
		o.set(pairs[i].(string), pairs[i+1])
	}
	return o
}

func merge(a, b *ordered) *ordered {
	for _, kv := range b.kvs {
		a.set(kv.k, kv.v)
	}
	return a
}

func (o *ordered) get(k string) any {
	for _, kv := range o.kvs {
		if kv.k == k {
			return kv.v
		}
	}
	return nil
}

func (o *ordered) set(k string, v any) {
	for i := range o.kvs {
		if o.kvs[i].k == k {
			o.kvs[i].v = v
			return
		}
	}
	o.kvs = append(o.kvs, kv{k, v})
}

func (o *ordered) del(k string) {
	for i := range o.kvs {
		if o.kvs[i].k == k {
			o.kvs = append(o.kvs[:i], o.kvs[i+1:]...)
			return
		}
	}
}

func (o *ordered) keys() []string {
	var out []string
	for _, kv := range o.kvs {
		out = append(out, kv.k)
	}
	return out
}

func (o *ordered) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, kv := range o.kvs {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(kv.k)
		buf.Write(k)
		buf.WriteByte(':')
		var vb bytes.Buffer
		enc := json.NewEncoder(&vb)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(kv.v); err != nil {
			return nil, err
		}
		buf.Write(bytes.TrimRight(vb.Bytes(), "\n"))
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func rawOrdered(b []byte) any {
	v, err := decodeOrdered(b)
	if err != nil {
		panic(err)
	}
	return v
}

// decodeOrdered decodes JSON keeping object key order (numbers as json.Number).
func decodeOrdered(b []byte) (*ordered, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	o, ok := v.(*ordered)
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	return o, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &ordered{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			o.kvs = append(o.kvs, kv{kt.(string), v})
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return tok, nil
}
