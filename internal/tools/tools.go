// Package tools implements the agent tools of sbx (sandbox_bash, exec_command,
// read_file, sandbox.exec, …) once, over the manager: each tool is a name, a
// description written for a model, JSON Schemas of its arguments and result,
// the capability a key needs to call it, and a function. The MCP server, the
// HTTP API and the CLI serve the same Set; none of them knows a tool's insides.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tools/repl"
)

// Tool is one tool's contract and implementation.
type Tool struct {
	Name        string
	Title       string
	Description string
	// Capability is what a key needs to call the tool (Capabilities).
	Capability string
	// Input and Output are JSON Schemas (draft 2020-12) of the arguments and
	// of the structured result. Input never lists sandbox_id: the transports
	// add it (Set.InputSchema).
	Input, Output json.RawMessage
	// ReadOnly and Destructive are hints for clients (MCP tool annotations).
	ReadOnly, Destructive bool

	in  reflect.Type // the argument struct, for the schema check
	run func(ctx context.Context, c *Call, args json.RawMessage) (Result, error)
}

// Result is a tool's structured result; Text renders it for a model that
// reads text (MCP content) rather than structuredContent.
type Result interface{ Text() string }

// Call is one tool call's context: the sandbox it acts on and what it may use.
type Call struct {
	Tool    string
	Sandbox sandbox.ID
	set     *Set
}

// M is the manager every tool acts through.
func (c *Call) M() *manager.Manager { return c.set.m }

// fail returns err as the call's error: named after the tool and the sandbox.
func (c *Call) fail(err error) error { return sandbox.Wrap(c.Tool, c.Sandbox, err) }

// define makes a Tool whose arguments decode strictly into In.
func define[In any, Out Result](t Tool, run func(ctx context.Context, c *Call, in In) (Out, error)) *Tool {
	t.in = reflect.TypeFor[In]()
	t.run = func(ctx context.Context, c *Call, args json.RawMessage) (Result, error) {
		var in In
		if err := decodeArgs(t.Name, t.Input, args, &in); err != nil {
			return nil, err
		}
		return run(ctx, c, in)
	}
	return &t
}

// Options configure a Set.
type Options struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// LLM is the model endpoint repl_execute's llm_query reaches; its zero
	// value makes llm_query say none is configured.
	LLM repl.LLM
}

// Set is every tool, over one manager.
type Set struct {
	m       *manager.Manager
	now     func() time.Time
	repl    *repl.Sessions
	ci      *codeInterp
	cursors cursors
	tools   []*Tool
	named   map[string]*Tool
}

// New returns the tool set over m.
func New(m *manager.Manager, opts Options) *Set {
	s := &Set{m: m, now: opts.Now, repl: repl.NewSessions(opts.LLM), named: map[string]*Tool{}}
	if s.now == nil {
		s.now = time.Now
	}
	s.ci = newCodeInterp(managerHost{s})
	if m != nil {
		m.OnGone(func(id sandbox.ID) { // what is kept per sandbox goes with it
			s.repl.Forget(string(id))
			s.ci.forget(id)
		})
	}
	for _, group := range [][]*Tool{shellTools(), execTools(), fileTools(), replTools(), seed004Tools(), bslTools()} {
		for _, t := range group {
			if s.named[t.Name] != nil {
				panic("tools: two tools named " + t.Name)
			}
			s.named[t.Name] = t
			s.tools = append(s.tools, t)
		}
	}
	return s
}

// List returns every tool, in a stable order (by name).
func (s *Set) List() []*Tool {
	out := slices.Clone(s.tools)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get returns the tool named name.
func (s *Set) Get(name string) (*Tool, bool) {
	t, ok := s.named[name]
	return t, ok
}

// Call runs tool name on sandbox id with args (a JSON object; empty means
// {}). The caller's key (manager.KeyFrom(ctx)) must hold the tool's
// capability. Errors are *sandbox.Error values named after the tool; Message
// gives the text an agent reads.
func (s *Set) Call(ctx context.Context, name string, id sandbox.ID, args json.RawMessage) (Result, error) {
	t, ok := s.named[name]
	if !ok {
		return nil, &sandbox.Error{Op: "call_tool", ID: id, Err: fmt.Errorf("tool %w: %q (the tools are: %s)",
			sandbox.ErrNotFound, truncate(name, 80), strings.Join(s.names(), ", "))}
	}
	c := &Call{Tool: t.Name, Sandbox: id, set: s}
	if err := allowed(ctx, t.Capability); err != nil {
		err = c.fail(err)
		if s.m != nil {
			s.m.Record(ctx, id, "tool", t.Name, "", err)
		}
		return nil, err
	}
	res, err := t.run(ctx, c, args)
	if err != nil {
		err = c.fail(err)
	}
	if s.m != nil {
		// The tool's own calls are audited under their names; this record
		// says which tool made them. Never the arguments: they may hold secrets.
		s.m.Record(ctx, id, "tool", t.Name, "", err)
	}
	return res, err
}

func (s *Set) names() []string {
	var out []string
	for _, t := range s.List() {
		out = append(out, t.Name)
	}
	return out
}

// sandboxIDProperty is the argument every transport adds to each tool.
const sandboxIDProperty = "sandbox_id"

// InputSchema returns t's input schema with an optional sandbox_id property
// described by about (what the transport does without it).
func (t *Tool) InputSchema(about string) json.RawMessage {
	var s map[string]any
	if err := json.Unmarshal(t.Input, &s); err != nil {
		panic("tools: " + t.Name + ": input schema: " + err.Error())
	}
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props[sandboxIDProperty] = map[string]any{"type": "string", "description": about}
	s["properties"] = props
	out, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return out
}

// SplitSandboxID removes sandbox_id from args, returning it and the rest.
func SplitSandboxID(args json.RawMessage) (sandbox.ID, json.RawMessage, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		return "", nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return "", nil, fmt.Errorf("%w: the arguments are not a JSON object: %v", sandbox.ErrInvalid, err)
	}
	raw, ok := m[sandboxIDProperty]
	if !ok {
		return "", args, nil
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil {
		return "", nil, sandbox.Invalid(sandboxIDProperty, "is not a string")
	}
	delete(m, sandboxIDProperty)
	rest, err := json.Marshal(m)
	if err != nil {
		return "", nil, err
	}
	return sandbox.ID(id), rest, nil
}

// decodeArgs decodes args into dst, refusing unknown parameters by name and
// missing required ones.
func decodeArgs(tool string, schema, args json.RawMessage, dst any) error {
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(args, &raw); err != nil {
		return fmt.Errorf("%w: the arguments are not a JSON object: %v", sandbox.ErrInvalid, err)
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		panic("tools: " + tool + ": input schema: " + err.Error())
	}
	known := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		known = append(known, k)
	}
	sort.Strings(known)
	var errs []error
	for k := range raw {
		if _, ok := s.Properties[k]; !ok {
			errs = append(errs, fmt.Errorf("%w: unknown parameter %q (%s takes: %s)", sandbox.ErrInvalid,
				truncate(k, 80), tool, strings.Join(known, ", ")))
		}
	}
	for _, k := range s.Required {
		if v, ok := raw[k]; !ok || string(v) == "null" {
			errs = append(errs, sandbox.Invalid(k, "is required"))
		}
	}
	if len(errs) > 0 {
		sortErrs(errs)
		return errors.Join(errs...)
	}
	for k, v := range raw {
		if err := decodeField(dst, k, v); err != nil {
			errs = append(errs, err)
		}
	}
	sortErrs(errs)
	return errors.Join(errs...)
}

// decodeField decodes one argument into the field of dst tagged key, so that a
// wrong type names its parameter.
func decodeField(dst any, key string, v json.RawMessage) error {
	rv := reflect.ValueOf(dst).Elem()
	for i := 0; i < rv.NumField(); i++ {
		if jsonName(rv.Type().Field(i)) != key {
			continue
		}
		if err := json.Unmarshal(v, rv.Field(i).Addr().Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return sandbox.Invalid(key, "must be %s, not %s", jsonKind(rv.Field(i).Type()), te.Value)
			}
			return sandbox.Invalid(key, "%v", err)
		}
		return nil
	}
	return nil // in the schema, not in the struct: the schema check catches it
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice:
		return "an array"
	}
	return t.String()
}

func sortErrs(errs []error) {
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
}

// Message is the text an agent reads for a failed call: the seeds' exact
// wording for the errors they define, else the error naming the tool and the
// sandbox.
func Message(err error) string {
	var e *exactError
	if errors.As(err, &e) {
		return e.msg
	}
	return err.Error()
}

// exactError is an error whose text a source document fixes ("timeout",
// "access denied: sandbox.exec"): transports show it verbatim.
type exactError struct {
	msg   string
	class error
}

func (e *exactError) Error() string { return e.msg }
func (e *exactError) Unwrap() error { return e.class }

// exact returns an error of class whose message is exactly msg.
func exact(class error, msg string) error { return &exactError{msg: msg, class: class} }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// jsonText renders v as indented JSON: the text form of results with no
// better one.
func jsonText(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
