// Package docs checks the documentation: README.md is a front page, every
// link between the pages resolves to a file and a heading, and every
// hookrelay command the pages show is one the CLI accepts.
package docs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinaries()
	os.Exit(code)
}

// page is a markdown file: its lines, and which are inside fenced code.
type page struct {
	path  string
	lines []string
	code  []bool
}

func readPage(t *testing.T, path string) *page {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	p := &page{path: path, lines: strings.Split(string(raw), "\n")}
	fenced := false
	for _, l := range p.lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			p.code = append(p.code, true)
			fenced = !fenced
			continue
		}
		p.code = append(p.code, fenced)
	}
	require.False(t, fenced, "%s: a code fence is not closed", path)
	return p
}

// pages are README.md and every page under docs/.
func pages(t *testing.T) []*page {
	t.Helper()
	paths, err := filepath.Glob("*.md")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	out := []*page{readPage(t, filepath.Join("..", "README.md"))}
	for _, p := range paths {
		out = append(out, readPage(t, p))
	}
	return out
}

// anchors are the ids GitHub gives the page's headings: lower case,
// punctuation dropped, spaces as hyphens, a repeat suffixed -1, -2.
func (p *page) anchors() map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for i, l := range p.lines {
		if p.code[i] || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		if text == "" || !strings.HasPrefix(l, strings.Repeat("#", len(l)-len(strings.TrimLeft(l, "#")))+" ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of every page names a file that exists, and a
// heading of it when it has an anchor.
func TestLinksResolve(t *testing.T) {
	all := pages(t)
	byPath := map[string]*page{}
	for _, p := range all {
		abs, err := filepath.Abs(p.path)
		require.NoError(t, err)
		byPath[abs] = p
	}
	checked := 0
	for _, p := range all {
		for i, l := range p.lines {
			if p.code[i] {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := p
				if file != "" {
					abs, err := filepath.Abs(filepath.Join(filepath.Dir(p.path), file))
					require.NoError(t, err)
					_, err = os.Stat(abs)
					require.NoError(t, err, "%s:%d: link to %s", p.path, i+1, target)
					dest = byPath[abs]
				}
				if anchor != "" {
					require.NotNil(t, dest, "%s:%d: an anchor into %s, which is not a checked page", p.path, i+1, file)
					require.True(t, dest.anchors()[anchor], "%s:%d: %s has no heading #%s", p.path, i+1, dest.path, anchor)
				}
				checked++
			}
		}
	}
	t.Logf("%d links checked", checked)
	require.Greater(t, checked, 30)
}

// README.md is a front page a newcomer reads in five minutes: a few
// hundred lines, the promise stated and then stated exactly, the two
// set-up commands, Try it, a table of contents of its sections, and a link
// to every page of docs/.
func TestReadmeIsAFrontPage(t *testing.T) {
	readme := readPage(t, filepath.Join("..", "README.md"))
	require.LessOrEqual(t, len(readme.lines), 300, "README.md is a front page: move reference to docs/")
	text := strings.Join(readme.lines, "\n")
	require.Contains(t, text, "**No webhook is ever lost, and none is applied twice.** Exactly:")
	for _, cmd := range []string{"```sh\nscripts/run.sh\n```", "```sh\nscripts/test.sh\n```"} {
		require.Contains(t, text, cmd)
	}

	// The contents list every section.
	var sections, contents []string
	inContents := false
	for i, l := range readme.lines {
		if readme.code[i] {
			continue
		}
		if strings.HasPrefix(l, "## ") {
			inContents = l == "## Contents"
			if !inContents {
				sections = append(sections, strings.TrimPrefix(l, "## "))
			}
			continue
		}
		if m := regexp.MustCompile(`^- \[(.+)\]\(#.+\)$`).FindStringSubmatch(l); inContents && m != nil {
			contents = append(contents, m[1])
		}
	}
	require.Contains(t, sections, "Try it")
	require.Equal(t, sections, contents, "## Contents lists every section, in order")

	// Every page of docs/ is linked from the front page.
	docs, err := filepath.Glob("*.md")
	require.NoError(t, err)
	for _, d := range docs {
		require.Contains(t, text, "](docs/"+d+")", "README links docs/%s", d)
	}
	license, err := os.ReadFile(filepath.Join("..", "LICENSE"))
	require.NoError(t, err)
	require.Contains(t, string(license), "Apache License\n                           Version 2.0, January 2004")
}

// Every hookrelay command the pages show exists with the flags it shows:
// the CLI parses it (with --help appended, so that it runs nothing).
// cmd/hookrelay's TestShownCommandsParseDry checks the same lines' flags
// and arguments as the command would (--help skips the arguments' check).
func TestShownCommandsParse(t *testing.T) {
	bin := filepath.Join(testenv.Binaries(t), "hookrelay")
	shown, err := testenv.ShownCommands("..")
	require.NoError(t, err)
	require.Greater(t, len(shown), 40, "the pages show the CLI")
	for _, c := range shown {
		cmd := exec.Command(bin, append(slices.Clone(c.Args), "--help")...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", c, out)
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		require.True(t, sc.Scan())
		require.NotContains(t, sc.Text(), "Error", c.String())
	}
	t.Logf("%d commands checked", len(shown))
}

// Issue 38, first-time user 1: a code span broken over two lines of prose
// is a command the pages show too (README's "tokens create --name me
// --role operator" was one, and wrong).
func TestShownCommandsSpanLines(t *testing.T) {
	shown, err := testenv.ShownCommands("..")
	require.NoError(t, err)
	var spans []string
	for _, c := range shown {
		if strings.HasPrefix(c.Where, "README.md:") && len(c.Args) > 1 && c.Args[0] == "tokens" {
			spans = append(spans, strings.Join(c.Args, " "))
		}
	}
	require.Contains(t, spans, "tokens create me --role operator", "README's console sign-in shows the token command")
}
