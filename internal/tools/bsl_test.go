package tools

import (
	"errors"
	"reflect"
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

// A report in the json reporter's format (bsl-json.json): file URIs,
// percent-encoded; 0-based ranges; severities by name, and by LSP number
// as other serializers write them; a code as lsp4j's Either.
const bslSample = `{
  "date": "2025-01-02 03:04:05",
  "sourceDir": "/workspace/src",
  "fileinfos": [
    {
      "path": "file:///workspace/src/CommonModules/%D0%9E%D0%B1%D1%89%D0%B8%D0%B9/Ext/Module.bsl",
      "mdoRef": "CommonModule.Общий",
      "diagnostics": [
        {"range": {"start": {"line": 9, "character": 0}, "end": {"line": 9, "character": 130}},
         "severity": "Information", "code": "LineLength", "source": "bsl-language-server",
         "message": "Длина строки 130 превышает максимально допустимую 120"},
        {"range": {"start": {"line": 2, "character": 4}, "end": {"line": 2, "character": 12}},
         "severity": "Error", "code": "ParseError", "source": "bsl-language-server", "message": "Ошибка разбора"}
      ],
      "metrics": {"procedures": 1}
    },
    {
      "path": "Module2.os",
      "diagnostics": [
        {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 5}},
         "severity": 2, "code": {"left": "UnusedLocalVariable"}, "message": {"kind": "markdown", "value": "Unused"}}
      ]
    },
    {"path": "file:///workspace/src/Empty.bsl", "diagnostics": []}
  ]
}`

func TestParseBSLReport(t *testing.T) {
	got, err := parseBSLReport([]byte(bslSample), "/workspace/src", nil, len(bslSeverities))
	if err != nil {
		t.Fatal(err)
	}
	want := bslCheckOut{
		Diagnostics: []bslDiagnostic{
			{File: "/workspace/src/CommonModules/Общий/Ext/Module.bsl", Line: 3, Column: 5, EndLine: 3, EndColumn: 13, Severity: "Error", Code: "ParseError", Message: "Ошибка разбора"},
			{File: "/workspace/src/CommonModules/Общий/Ext/Module.bsl", Line: 10, Column: 1, EndLine: 10, EndColumn: 131, Severity: "Information", Code: "LineLength", Message: "Длина строки 130 превышает максимально допустимую 120"},
			{File: "/workspace/src/Module2.os", Line: 1, Column: 1, EndLine: 1, EndColumn: 6, Severity: "Warning", Code: "UnusedLocalVariable", Message: "Unused"},
		},
		Counts:        map[string]int{"Error": 1, "Warning": 1, "Information": 1, "Hint": 0},
		FilesAnalyzed: 3,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	// min_severity Warning drops the Information; a copy maps back.
	got, err = parseBSLReport([]byte(bslSample), "/workspace/src", map[string]string{"/workspace/src/Module2.os": "/home/u/Module2.os"}, severityRank("warning"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Diagnostics) != 2 || got.Counts["Information"] != 0 || got.Diagnostics[0].File != "/home/u/Module2.os" {
		t.Errorf("filtered: %+v", got)
	}

	if _, err := parseBSLReport([]byte("not json"), "/", nil, 4); !errors.Is(err, sandbox.ErrWrongState) {
		t.Errorf("bad report: %v", err)
	}
}

func TestBSLFile(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"file:///tmp/x/A%20B.bsl", "/tmp/x/A B.bsl"},
		{"file:/tmp/x/a.bsl", "/tmp/x/a.bsl"},
		{"sub/a.os", "/src/sub/a.os"},
		{"/abs/a.bsl", "/abs/a.bsl"},
	} {
		if got := bslFile(tc.in, "/src", nil); got != tc.want {
			t.Errorf("bslFile(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
