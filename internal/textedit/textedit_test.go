package textedit

import (
	"strings"
	"testing"
)

func TestApplyEdit(t *testing.T) {
	const py = "def f(x):\n    if x:\n        return 1\n    return 0\n"
	cases := []struct {
		name       string
		content    string
		old, new   string
		all        bool
		want       string
		strategy   string
		n          int
		start, end int64
		wantErr    string // substring; the edit fails
	}{
		{name: "exact once", content: "a\nb\nc\n", old: "b", new: "B", want: "a\nB\nc\n", strategy: EditExact, n: 1, start: 2, end: 2},
		{name: "exact within a line", content: "x = foo(1)\n", old: "foo(1)", new: "bar(2)", want: "x = bar(2)\n", strategy: EditExact, n: 1, start: 1, end: 1},
		{name: "exact, new has more lines", content: "a\nb\nc\n", old: "b\n", new: "b1\nb2\n", want: "a\nb1\nb2\nc\n", strategy: EditExact, n: 1, start: 2, end: 3},
		{name: "exact deletion", content: "a\nb\nc\n", old: "b\n", new: "", want: "a\nc\n", strategy: EditExact, n: 1, start: 2, end: 2},
		{name: "exact, several", content: "x\ny\nx\nz\nx\n", old: "x", new: "X",
			wantErr: "old_string occurs 3 times in /f (lines 1, 3, 5); give more context or set replace_all"},
		{name: "exact, replace all", content: "x\ny\nx\nz\nx\n", old: "x", new: "X", all: true, want: "X\ny\nX\nz\nX\n", strategy: EditExact, n: 3, start: 1, end: 1},
		{name: "empty old", content: "a", old: "", new: "b", wantErr: "old_string is empty"},
		{name: "old is new", content: "a", old: "a", new: "a", wantErr: "old_string and new_string are the same"},

		{name: "trailing whitespace ignored", content: "a  \nb\t\nc\n", old: "a\nb\n", new: "A\nB\n", want: "A\nB\nc\n", strategy: EditWhitespace, n: 1, start: 1, end: 2},
		{name: "trailing whitespace, no line end in old", content: "a  \nb\t\nc\n", old: "a\nb", new: "A\nB", want: "A\nB\nc\n", strategy: EditWhitespace, n: 1, start: 1, end: 2},
		{name: "crlf file", content: "a\r\nb\r\nc\r\n", old: "a\nb\n", new: "x\ny\nz\n", want: "x\r\ny\r\nz\r\nc\r\n", strategy: EditWhitespace, n: 1, start: 1, end: 3},
		{name: "whitespace, several", content: "a \nb\na\t\nb\n", old: "a\nb", new: "c",
			wantErr: "old_string matches 2 places in /f when ignoring trailing whitespace (lines 1-2, 3-4); give more context or set replace_all"},
		{name: "whitespace, replace all", content: "a \nb\na\t\nb\n", old: "a\nb", new: "c", all: true, want: "c\nc\n", strategy: EditWhitespace, n: 2, start: 1, end: 1},

		{name: "indentation, re-indented deeper", content: py, old: "if x:\n    return 1\n", new: "if not x:\n    return 2\nreturn 3\n",
			want: "def f(x):\n    if not x:\n        return 2\n    return 3\n    return 0\n", strategy: EditIndentation, n: 1, start: 2, end: 4},
		{name: "indentation, re-indented shallower", content: "x:\n  y\n", old: "    x:\n      y", new: "    z:\n      w\n    v",
			want: "z:\n  w\nv\n", strategy: EditIndentation, n: 1, start: 1, end: 3},
		{name: "indentation, tabs for spaces", content: "func f() {\n\tif a {\n\t\tb()\n\t}\n}\n", old: "    if a {\n        b()\n    }", new: "    if a {\n        c()\n    }",
			want: "func f() {\n\tif a {\n\t\tc()\n\t}\n}\n", strategy: EditIndentation, n: 1, start: 2, end: 4},

		{name: "fuzzy", content: "one\ntwo\nfunc compute(a, b int) int {\n\treturn a + b\n}\nthree\n",
			old: "func compute(a, b int) int {\n\treturn a+b\n}\n", new: "func compute(a, b int) int {\n\treturn a * b\n}\n",
			want: "one\ntwo\nfunc compute(a, b int) int {\n\treturn a * b\n}\nthree\n", strategy: EditFuzzy, n: 1, start: 3, end: 5},
		{name: "fuzzy, below the threshold", content: "alpha beta\ngamma delta\nzzz\n", old: "alpha betx\ngamma qqqqq\n", new: "x",
			wantErr: "old_string not found in /f; closest match at lines 1-2 (score 0.7"},
		{name: "fuzzy, ambiguous", content: "total = price * count + tax\nother\ntotal = price * count + tux\n", old: "total = price * count + tbx", new: "x",
			wantErr: "old_string matches 2 places in /f about equally: lines 1-1 (score 0.96), lines 3-3 (score 0.96); give more context"},
		{name: "fuzzy, clearly closer", content: "total = price * count + tax\nother\ntotal = price * count + fee\n", old: "total = price * count + tx", new: "x",
			want: "x\nother\ntotal = price * count + fee\n", strategy: EditFuzzy, n: 1, start: 1, end: 1},
		{name: "longer than the file", content: "a\n", old: "x\ny\nz", new: "q", wantErr: "old_string not found in /f (old_string has 3 lines, the file 1)"},
		{name: "empty file", content: "", old: "x", new: "q", wantErr: "old_string not found in /f (old_string has 1 lines, the file 0)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, res, err := Apply("/f", tc.content, tc.old, tc.new, tc.all)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Apply = %q, %+v, %v; want an error containing %q", got, res, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply = %v", err)
			}
			if got != tc.want {
				t.Errorf("text = %q, want %q", got, tc.want)
			}
			if res.Strategy != tc.strategy || res.Replacements != tc.n || res.StartLine != tc.start || res.EndLine != tc.end {
				t.Errorf("result = %+v, want strategy %s, %d replacements, lines %d-%d", res, tc.strategy, tc.n, tc.start, tc.end)
			}
			if res.Exact != (tc.strategy == EditExact) || (tc.strategy != EditFuzzy && res.Score != 1) ||
				(tc.strategy == EditFuzzy && (res.Score < FuzzyThreshold || res.Score >= 1)) {
				t.Errorf("result = %+v: exact and score do not fit strategy %s", res, tc.strategy)
			}
		})
	}
}

// The fuzzy search finds the best window in a long file whose lines look
// alike, and says which lines it replaced.
func TestApplyEditFuzzyLongFile(t *testing.T) {
	var b strings.Builder
	for i := range 5000 {
		b.WriteString("\tvalue" + strings.Repeat("x", i%7) + " := compute(input, 42)\n")
	}
	b.WriteString("\tresult := transform(input, options)\n\treturn result, nil\n")
	content := b.String()
	got, res, err := Apply("/f", content, "result := transfrom(input, option)\nreturn result, nil", "return transform(input, options)", false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Strategy != EditFuzzy || res.StartLine != 5001 || res.EndLine != 5001 {
		t.Errorf("result = %+v, want fuzzy at line 5001", res)
	}
	if !strings.HasSuffix(got, "\treturn transform(input, options)\n") {
		t.Errorf("text ends %q", got[len(got)-80:])
	}
}

func TestReindent(t *testing.T) {
	cases := []struct{ s, from, to, want string }{
		{"a\n  b\n\nc", "", "\t", "\ta\n\t  b\n\n\tc"},
		{"    a\n      b\n  c", "    ", "  ", "  a\n    b\nc"},
		{"  a\nb", "  ", "    ", "    a\n  b"},
		{"\ta\n\t\tb\nc", "\t", "    ", "    a\n        b\nc"},
		{"    a\n          b\n  \tc", "    ", "\t", "\ta\n\t\t  b\n  \tc"},
		{"\ta\n  b", "\t", "   ", "   a\n  b"},
	}
	for _, tc := range cases {
		if got := reindent(tc.s, tc.from, tc.to, nil); got != tc.want {
			t.Errorf("reindent(%q, %q, %q) = %q, want %q", tc.s, tc.from, tc.to, got, tc.want)
		}
	}
	// Levels: a snippet indented by 2 for a file indented by 4.
	levels := map[string]string{"": "", "  ": "    "}
	if got, want := reindent("if a:\n  b()\n    c()\nd()", "", "", levels), "if a:\n    b()\n      c()\nd()"; got != want {
		t.Errorf("reindent by levels = %q, want %q", got, want)
	}
}

func TestLevenshtein(t *testing.T) {
	var lv levenshtein
	cases := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"kitten", "sitting", 3}, {"flaw", "lawn", 2}, {"same", "same", 0},
	}
	for _, tc := range cases {
		if got, _ := lv.distance(tc.a, tc.b, 100); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if tc.want > 1 {
			if got, _ := lv.distance(tc.a, tc.b, tc.want-2); got <= tc.want-2 {
				t.Errorf("distance(%q, %q, limit %d) = %d, want above the limit", tc.a, tc.b, tc.want-2, got)
			}
		}
	}
}
