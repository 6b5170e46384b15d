// Package textedit is the matching of the edit_file tool, with no I/O: find old_string
// in a file's text, exactly or, failing that, in the one region of as many
// lines that matches it closely enough, and replace it.
//
// The strategies, tried in order until one finds something:
//
//   - exact: old_string as given, anywhere (within lines too).
//   - whitespace: windows of whole lines equal to old_string's lines once
//     trailing whitespace (and \r) is ignored.
//   - indentation: the same, ignoring leading whitespace too; new_string is
//     then re-indented to the file's indentation (see reindent).
//   - fuzzy: the window of as many lines whose similarity to old_string is
//     highest, at least FuzzyThreshold, and clearly above any other's (by
//     fuzzyMargin). Similarity is a normalised Levenshtein distance over
//     the window, line by line, each line with its leading and trailing
//     whitespace ignored: 1 - sum(lev(a_i, b_i)) / sum(max(len(a_i),
//     len(b_i))), in bytes. new_string is re-indented as for indentation.
//
// A match that is not unique (several exact occurrences, several windows, or
// fuzzy candidates about as close as the best) is an error naming each
// candidate's lines, unless replace_all is set (it does not apply to fuzzy
// matches, which are always applied once).
package textedit

import (
	"fmt"
	"slices"
	"strings"
)

// Edit strategies.
const (
	EditExact       = "exact"
	EditWhitespace  = "whitespace"
	EditIndentation = "indentation"
	EditFuzzy       = "fuzzy"
)

// Fuzzy matching bounds.
const (
	// FuzzyThreshold is the least similarity a fuzzy match needs.
	FuzzyThreshold = 0.85
	// fuzzyMargin is how far the best fuzzy candidate must be above the
	// runner-up to win; closer, the match is ambiguous.
	fuzzyMargin = 0.05
	// fuzzyBudget bounds the Levenshtein cells one fuzzy search computes
	// (about a second), so a huge file fails clearly instead of hanging.
	fuzzyBudget = 300_000_000
	// maxCandidates is how many candidates an error lists.
	maxCandidates = 10
)

// Result says what an edit did.
type Result struct {
	Replacements int
	Exact        bool
	// Score is 1 but for a fuzzy match: its similarity.
	Score float64
	// StartLine and EndLine are the 1-based lines the first replacement
	// occupies in the edited text; EndLine is StartLine when the new text
	// has no line of its own.
	StartLine, EndLine int64
	Strategy           string
}

// Apply returns content with old replaced by new as the strategies above
// find it. name is the file's path, for the errors, every one of which says
// what was wrong with old or new: the caller's invalid argument.
func Apply(name, content, old, new string, replaceAll bool) (string, Result, error) {
	switch {
	case old == "":
		return "", Result{}, fmt.Errorf("old_string is empty")
	case old == new:
		return "", Result{}, fmt.Errorf("old_string and new_string are the same")
	}
	if out, res, ok, err := editExact(name, content, old, new, replaceAll); ok || err != nil {
		return out, res, err
	}
	t := splitText(content)
	o := newOldText(old)
	for _, st := range []struct {
		name string
		norm func(string) string
	}{
		{EditWhitespace, func(s string) string { return strings.TrimRight(s, " \t\r") }},
		{EditIndentation, strings.TrimSpace},
	} {
		wins := t.windows(o, st.norm)
		switch {
		case len(wins) == 0:
			continue
		case len(wins) > 1 && !replaceAll:
			return "", Result{}, fmt.Errorf("old_string matches %d places in %s when %s (lines %s); give more context or set replace_all",
				len(wins), name, ignoring(st.name), t.ranges(wins, len(o.lines)))
		}
		out, start, end := t.replace(wins, o, new, st.name == EditIndentation)
		return out, Result{Replacements: len(wins), Score: 1, StartLine: start, EndLine: end, Strategy: st.name}, nil
	}
	return editFuzzy(name, t, o, new)
}

func ignoring(strategy string) string {
	if strategy == EditWhitespace {
		return "ignoring trailing whitespace"
	}
	return "ignoring indentation"
}

// editExact replaces old as given; ok is false when it does not occur.
func editExact(name, content, old, new string, replaceAll bool) (string, Result, bool, error) {
	var at []int
	for i := 0; ; {
		k := strings.Index(content[i:], old)
		if k < 0 {
			break
		}
		at = append(at, i+k)
		i += k + len(old)
		if !replaceAll && len(at) > maxCandidates {
			break
		}
	}
	switch {
	case len(at) == 0:
		return "", Result{}, false, nil
	case len(at) > 1 && !replaceAll:
		n := strings.Count(content, old)
		lines := make([]string, 0, min(len(at), maxCandidates))
		for _, i := range at[:min(len(at), maxCandidates)] {
			lines = append(lines, fmt.Sprint(lineOf(content, i)))
		}
		if n > maxCandidates {
			lines = append(lines, "…")
		}
		return "", Result{}, false, fmt.Errorf("old_string occurs %d times in %s (lines %s); give more context or set replace_all",
			n, name, strings.Join(lines, ", "))
	}
	start := lineOf(content, at[0])
	res := Result{Replacements: len(at), Exact: true, Score: 1, StartLine: start, EndLine: start + linesIn(new), Strategy: EditExact}
	return strings.Replace(content, old, new, len(at)), res, true, nil
}

// lineOf is the 1-based line of content holding byte i.
func lineOf(content string, i int) int64 { return int64(strings.Count(content[:i], "\n")) + 1 }

// linesIn is how many lines s spans past its first: its line ends, one at
// its very end aside.
func linesIn(s string) int64 { return int64(strings.Count(strings.TrimSuffix(s, "\n"), "\n")) }

// text is a file's text split in lines.
type text struct {
	s string
	// start[i] is where line i begins, end[i] where its content ends
	// (before \n or \r\n); start has one more entry, len(s) or the start of
	// a last, empty line.
	start, end []int
}

func splitText(s string) *text {
	t := &text{s: s}
	for i := 0; i < len(s); {
		t.start = append(t.start, i)
		k := strings.IndexByte(s[i:], '\n')
		if k < 0 {
			t.end = append(t.end, len(s))
			i = len(s)
			break
		}
		e := i + k
		if e > i && s[e-1] == '\r' {
			e--
		}
		t.end = append(t.end, e)
		i += k + 1
	}
	t.start = append(t.start, len(s))
	return t
}

func (t *text) n() int            { return len(t.end) }
func (t *text) line(i int) string { return t.s[t.start[i]:t.end[i]] }

// crlf reports whether line i ends with \r\n.
func (t *text) crlf(i int) bool { return t.end[i]+1 < len(t.s) && t.s[t.end[i]] == '\r' }

// oldText is old_string split in lines, without the line end at its very end.
type oldText struct {
	lines []string
	eol   bool // old_string ended with a line end
}

func newOldText(old string) oldText {
	o := oldText{eol: strings.HasSuffix(old, "\n")}
	for l := range strings.SplitSeq(strings.TrimSuffix(old, "\n"), "\n") {
		o.lines = append(o.lines, strings.TrimSuffix(l, "\r"))
	}
	return o
}

// windows returns the first line of every window of len(o.lines) lines equal
// to o's once norm is applied to both, not overlapping.
func (t *text) windows(o oldText, norm func(string) string) []int {
	k := len(o.lines)
	want := make([]string, k)
	for j, l := range o.lines {
		want[j] = norm(l)
	}
	var wins []int
	for i := 0; i+k <= t.n(); i++ {
		ok := true
		for j := 0; j < k && ok; j++ {
			ok = norm(t.line(i+j)) == want[j]
		}
		if !ok {
			continue
		}
		wins = append(wins, i)
		i += k - 1
	}
	return wins
}

// ranges lists the 1-based lines of windows of k lines starting at wins.
func (t *text) ranges(wins []int, k int) string {
	var b strings.Builder
	for n, i := range wins {
		if n == maxCandidates {
			b.WriteString(", …")
			break
		}
		if n > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d-%d", i+1, i+k)
	}
	return b.String()
}

// replace replaces the windows of len(o.lines) lines starting at wins (in
// order, not overlapping) with new; with reindent, new is re-indented to
// each window's indentation. A \r\n file gets \r\n line ends in new. It
// returns the text and the lines the first replacement occupies.
func (t *text) replace(wins []int, o oldText, new string, reindent bool) (string, int64, int64) {
	k := len(o.lines)
	var b strings.Builder
	b.Grow(len(t.s) + len(wins)*len(new))
	prev := 0
	var first, last int64
	for n, i := range wins {
		from, to := t.start[i], t.end[i+k-1]
		ins := new
		if reindent {
			ins = reindentFor(ins, o.lines, t, i)
		}
		if o.eol {
			if strings.HasSuffix(ins, "\n") {
				ins = strings.TrimSuffix(ins, "\n")
			} else {
				to = t.start[i+k] // old took the line end, and new gives none back
			}
		}
		if t.crlf(i + k - 1) {
			ins = strings.ReplaceAll(strings.ReplaceAll(ins, "\r\n", "\n"), "\n", "\r\n")
		}
		b.WriteString(t.s[prev:from])
		if n == 0 {
			first = lineOf(b.String(), b.Len())
			last = first + linesIn(ins)
		}
		b.WriteString(ins)
		prev = to
	}
	b.WriteString(t.s[prev:])
	return b.String(), first, last
}

// reindentFor re-indents new to window i of t, which old matched ignoring
// indentation: by the indentation each of old's lines has there (levels),
// and the difference of the first non-blank one's (from, to).
func reindentFor(new string, old []string, t *text, i int) string {
	var from, to string
	levels := map[string]string{}
	for j, l := range old {
		if strings.TrimSpace(l) == "" {
			continue
		}
		o, f := indentOf(l), indentOf(t.line(i+j))
		if len(levels) == 0 {
			from, to = o, f
		}
		if _, ok := levels[o]; !ok {
			levels[o] = f
		}
	}
	return reindent(new, from, to, levels)
}

func indentOf(s string) string { return s[:len(s)-len(strings.TrimLeft(s, " \t"))] }

// reindent moves every non-blank line of s from indentation from to to,
// levels mapping more of old's indentations to the file's (from to to among
// them; nil for none). When one of from and to is spaces and the other tabs
// (4 spaces for 1 tab, say), each line's indentation is converted at that
// ratio. Otherwise a line indented as a level is indented as it maps to; one
// indented deeper than some levels gets the deepest one's mapping and keeps
// the rest; any other gets to in place of from when it starts with it, and
// else what to adds to from, or loses what from adds to to.
func reindent(s, from, to string, levels map[string]string) string {
	if from == to && identity(levels) {
		return s
	}
	conv := indentConverter(from, to)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ind := indentOf(l)
		if conv != nil {
			if c, ok := conv(ind); ok {
				lines[i] = c + l[len(ind):]
				continue
			}
		}
		if m, ok := levels[ind]; ok {
			lines[i] = m + l[len(ind):]
			continue
		}
		if k, ok := deepestLevel(levels, ind); ok {
			lines[i] = levels[k] + l[len(k):]
			continue
		}
		switch {
		case strings.HasPrefix(l, from):
			lines[i] = to + l[len(from):]
		case strings.HasPrefix(to, from):
			lines[i] = to[len(from):] + l
		case strings.HasPrefix(from, to):
			lines[i] = l[min(len(ind), len(from)-len(to)):]
		}
	}
	return strings.Join(lines, "\n")
}

// identity reports whether levels maps every indentation to itself.
func identity(levels map[string]string) bool {
	for o, f := range levels {
		if o != f {
			return false
		}
	}
	return true
}

// deepestLevel returns the longest indentation of levels that ind extends.
func deepestLevel(levels map[string]string, ind string) (string, bool) {
	best, found := "", false
	for o := range levels {
		if strings.HasPrefix(ind, o) && (!found || len(o) > len(best)) {
			best, found = o, true
		}
	}
	return best, found
}

// indentConverter returns a function converting an indentation of spaces to
// tabs or back, when from and to are one and the other in a whole ratio
// (from "    " to "\t": 4 spaces a tab); else nil. The function reports
// false for an indentation that mixes them.
func indentConverter(from, to string) func(string) (string, bool) {
	runOf := func(s string, c byte) bool { return s != "" && strings.Count(s, string(c)) == len(s) }
	switch {
	case runOf(from, ' ') && runOf(to, '\t') && len(from)%len(to) == 0:
		w := len(from) / len(to) // spaces a tab
		return func(ind string) (string, bool) {
			if ind != "" && !runOf(ind, ' ') {
				return "", false
			}
			return strings.Repeat("\t", len(ind)/w) + strings.Repeat(" ", len(ind)%w), true
		}
	case runOf(from, '\t') && runOf(to, ' ') && len(to)%len(from) == 0:
		w := len(to) / len(from)
		return func(ind string) (string, bool) {
			if ind != "" && !runOf(ind, '\t') {
				return "", false
			}
			return strings.Repeat(" ", len(ind)*w), true
		}
	}
	return nil
}

// candidate is a fuzzy window and its similarity.
type candidate struct {
	line  int // 0-based first line
	score float64
}

// editFuzzy replaces the window most similar to o, when it is similar
// enough and clearly the most similar.
func editFuzzy(name string, t *text, o oldText, new string) (string, Result, error) {
	k := len(o.lines)
	if k > t.n() {
		return "", Result{}, fmt.Errorf("old_string not found in %s (old_string has %d lines, the file %d)", name, k, t.n())
	}
	top, complete := fuzzyTop(t, o, 3)
	if !complete {
		return "", Result{}, fmt.Errorf("old_string not found in %s, and the file is too large to look for a close match (%d lines)", name, t.n())
	}
	best := top[0]
	if best.score < FuzzyThreshold {
		return "", Result{}, fmt.Errorf("old_string not found in %s; closest match at lines %d-%d (score %.2f, below %.2f)",
			name, best.line+1, best.line+k, best.score, FuzzyThreshold)
	}
	var close []string
	for _, c := range top {
		if c.score >= FuzzyThreshold && best.score-c.score < fuzzyMargin {
			close = append(close, fmt.Sprintf("lines %d-%d (score %.2f)", c.line+1, c.line+k, c.score))
		}
	}
	if len(close) > 1 {
		return "", Result{}, fmt.Errorf("old_string matches %d places in %s about equally: %s; give more context",
			len(close), name, strings.Join(close, ", "))
	}
	out, start, end := t.replace([]int{best.line}, o, new, true)
	return out, Result{Replacements: 1, Score: best.score, StartLine: start, EndLine: end, Strategy: EditFuzzy}, nil
}

// fuzzyTop returns the n most similar windows, best first (branch and bound:
// a window whose similarity cannot reach the n-th best so far is not
// computed in full). complete is false when fuzzyBudget ran out.
func fuzzyTop(t *text, o oldText, n int) ([]candidate, bool) {
	k := len(o.lines)
	want := make([]string, k)
	for j, l := range o.lines {
		want[j] = strings.TrimSpace(l)
	}
	have := make([]string, t.n())
	for i := range have {
		have[i] = strings.TrimSpace(t.line(i))
	}
	var top []candidate
	var lv levenshtein
	budget := fuzzyBudget
	for i := 0; i+k <= len(have); i++ {
		// Every line's distance is at least its length difference.
		total, lower := 0, 0
		for j := range k {
			a, b := len(have[i+j]), len(want[j])
			total += max(a, b)
			lower += abs(a - b)
		}
		if total == 0 {
			top = insertTop(top, candidate{i, 1}, n)
			continue
		}
		floor := -1.0 // the score a window must pass to enter top
		if len(top) == n {
			floor = top[n-1].score
		}
		if 1-float64(lower)/float64(total) <= floor {
			continue
		}
		// The most distance the window may have and still pass floor.
		allowed := total
		if floor >= 0 {
			allowed = int((1 - floor) * float64(total))
		}
		dist, rest := 0, lower
		for j := 0; j < k && dist <= allowed; j++ {
			a, b := have[i+j], want[j]
			rest -= abs(len(a) - len(b))
			d, cells := lv.distance(a, b, allowed-dist-rest)
			budget -= cells
			dist += d
		}
		if budget < 0 {
			return top, false
		}
		if dist > allowed {
			continue
		}
		top = insertTop(top, candidate{i, 1 - float64(dist)/float64(total)}, n)
	}
	return top, true
}

// insertTop inserts c into top (best first, ties by line), keeping n.
func insertTop(top []candidate, c candidate, n int) []candidate {
	i, _ := slices.BinarySearchFunc(top, c, func(a, b candidate) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return a.line - b.line
	})
	top = slices.Insert(top, i, c)
	return top[:min(len(top), n)]
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// levenshtein computes edit distances, reusing its rows.
type levenshtein struct{ prev, cur []int }

// distance returns the Levenshtein distance of a and b in bytes, or, once it
// is sure to exceed limit, some value above limit; and the cells it computed.
func (l *levenshtein) distance(a, b string, limit int) (int, int) {
	if a == b {
		return 0, 0
	}
	if len(a) < len(b) {
		a, b = b, a
	}
	if len(b) == 0 {
		return len(a), 0
	}
	if limit < 0 {
		return len(a), 0
	}
	if cap(l.prev) < len(b)+1 {
		l.prev, l.cur = make([]int, len(b)+1), make([]int, len(b)+1)
	}
	prev, cur := l.prev[:len(b)+1], l.cur[:len(b)+1]
	for j := range prev {
		prev[j] = j
	}
	cells := 0
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		low := cur[0]
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c = 1 + min(c, prev[j], cur[j-1])
			}
			cur[j] = c
			low = min(low, c)
		}
		cells += len(b)
		if low > limit {
			return low, cells
		}
		prev, cur = cur, prev
	}
	return prev[len(b)], cells
}
