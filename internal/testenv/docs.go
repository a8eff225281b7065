package testenv

import (
	"fmt"
	"github.com/google/shlex"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// ShownCommand is a hookrelay command line a documentation page shows:
// where (page:line) and its arguments after "hookrelay", quotes trimmed.
type ShownCommand struct {
	Where string
	Args  []string
	// Prose: shown in a code span of prose, where naming a command
	// ("`hookrelay purge` of a day") is a reference, not a command line.
	Prose bool
}

func (c ShownCommand) String() string { return c.Where + " hookrelay " + strings.Join(c.Args, " ") }

// shownCommand finds a hookrelay command in a line of code: "hookrelay" or
// "bin/hookrelay" as a word, then a command.
var shownCommand = regexp.MustCompile(`(?:^|[\s($])(?:bin/)?hookrelay((?:\s+[^\s|;&)#]+)+)`)

// inlineCode is a code span of prose; a span may run over a line break.
var inlineCode = regexp.MustCompile("`([^`]+)`")

// ShownCommands returns the hookrelay command lines that README.md and
// docs/*.md under the repository root show, sorted by where they are: in
// code blocks (continuations joined, comments dropped) and in code spans
// of prose (a span broken over two lines joined). A span that shows
// alternatives ("show|reset") or an ellipsis is a pattern, not a command.
func ShownCommands(root string) ([]ShownCommand, error) {
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	paths = append([]string{filepath.Join(root, "README.md")}, paths...)
	var out []ShownCommand
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return nil, err
		}
		for _, l := range shownLines(strings.Split(string(raw), "\n")) {
			if k := strings.Index(l.text, " #"); k >= 0 {
				l.text = l.text[:k]
			}
			for _, m := range shownCommand.FindAllStringSubmatch(l.text, -1) {
				// Quoted as a shell quotes ('{"id": body.id}' is one
				// argument); a line a shell could not split is split at
				// its spaces, so the CLI names what it refuses.
				args, err := shlex.Split(m[1])
				if err != nil {
					args = strings.Fields(m[1])
				}
				if len(args) == 0 || !unicode.IsLower(rune(args[0][0])) && !strings.HasPrefix(args[0], "-") {
					continue
				}
				for i, a := range args {
					args[i] = strings.Trim(a, `"'`)
				}
				out = append(out, ShownCommand{Where: fmt.Sprintf("%s:%d", rel, l.at), Args: args, Prose: l.prose})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b ShownCommand) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// line is a line of code, or a code span of prose, and the line of the
// page it starts on.
type line struct {
	text  string
	at    int
	prose bool
}

// shownLines are a page's lines of code (continuations joined) and the
// code spans of its prose, paragraph by paragraph.
func shownLines(lines []string) []line {
	var out []line
	fenced, cont := false, false
	var para []string // the prose paragraph read so far
	paraAt := 0
	flush := func() {
		text := strings.Join(para, "\n")
		for _, m := range inlineCode.FindAllStringSubmatchIndex(text, -1) {
			span := strings.Join(strings.Fields(text[m[2]:m[3]]), " ")
			if !strings.ContainsAny(span, "|…") {
				out = append(out, line{text: span, at: paraAt + strings.Count(text[:m[0]], "\n"), prose: true})
			}
		}
		para = nil
	}
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			flush()
			fenced, cont = !fenced, false
			continue
		}
		if !fenced {
			if strings.TrimSpace(l) == "" {
				flush()
				continue
			}
			if para == nil {
				paraAt = i + 1
			}
			para = append(para, l)
			continue
		}
		if cont {
			out[len(out)-1].text += " " + strings.TrimSpace(l)
		} else {
			out = append(out, line{text: l, at: i + 1})
		}
		cont = strings.HasSuffix(strings.TrimSpace(l), `\`)
		if cont {
			out[len(out)-1].text = strings.TrimSuffix(strings.TrimSpace(out[len(out)-1].text), `\`)
		}
	}
	flush()
	return out
}
