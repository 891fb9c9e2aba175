package tests

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	gotoken "go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestProtocolDocumentsEveryCode keeps docs/protocol.md complete: every error
// answer the HTTP layer can give (the apiError literals of internal/httpapi,
// with their HTTP status and retryable flag), every refusal the SQL entry
// points raise (synchro.refuse(status, code, ...) in sql/functions), and every
// push outcome (status and code) they answer must have its row in the
// document's tables; a code answered with several statuses has a row for each,
// and a row no source answers is an error too. The codes are read from the
// sources, so a code added later is caught without editing this test.
func TestProtocolDocumentsEveryCode(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	errs, outs := errorRows(string(doc)), outcomeRows(string(doc))

	goCodes, retryable := httpapiErrors(t)
	if len(goCodes) < 8 {
		t.Fatalf("found %d error answers in internal/httpapi; the parser no longer matches how apiError is built", len(goCodes))
	}
	answered := map[string]bool{} // "status code" of every answer the sources give
	for _, a := range goCodes {
		answered[a.status+" "+a.code] = true
		row, ok := errs[a.code][a.status]
		switch {
		case !ok:
			t.Errorf("docs/protocol.md, Errors: no row for %s %s (internal/httpapi)", a.status, a.code)
		case (row == "yes") != retryable[a.code]:
			t.Errorf("docs/protocol.md, Errors: %s %s documented retryable %s; internal/httpapi says %v", a.status, a.code, row, retryable[a.code])
		}
	}

	refusals, outcomes := sqlCodes(t)
	if len(refusals) < 5 || len(outcomes) < 5 {
		t.Fatalf("found %d refusals and %d push outcomes in sql/functions; the patterns no longer match", len(refusals), len(outcomes))
	}
	for _, r := range refusals {
		answered[r.status+" "+r.code] = true
		row, ok := errs[r.code][r.status]
		if !ok {
			t.Errorf("docs/protocol.md, Errors: no row for %s %s (synchro.refuse in %s)", r.status, r.code, r.file)
		}
		if ok && (row == "yes") != retryable[r.code] {
			t.Errorf("docs/protocol.md, Errors: %s %s documented retryable %s; internal/httpapi says %v", r.status, r.code, row, retryable[r.code])
		}
	}
	// A documented answer nothing gives: a status the code changed, or a code removed.
	for code, statuses := range errs {
		for status := range statuses {
			if !answered[status+" "+code] {
				t.Errorf("docs/protocol.md, Errors: row %s %s, but neither internal/httpapi nor synchro.refuse answers it", status, code)
			}
		}
	}
	for _, o := range outcomes {
		if !outs[o.status+"/"+o.code] {
			t.Errorf("docs/protocol.md, Push outcomes: no row for status %q code %q (%s)", o.status, o.code, o.file)
		}
	}
}

// errorRows maps each code of the document's errors table to its rows, by
// HTTP status, each to its retryable column (a code may be answered with
// several statuses, one row each):
// | 400 | `invalid_request` | no | ...
func errorRows(doc string) map[string]map[string]string {
	rows := map[string]map[string]string{}
	re := regexp.MustCompile("(?m)^\\| (\\d{3}) \\| `([a-z_]+)` \\| (yes|no) \\|")
	for _, m := range re.FindAllStringSubmatch(doc, -1) {
		if rows[m[2]] == nil {
			rows[m[2]] = map[string]string{}
		}
		rows[m[2]][m[1]] = m[3]
	}
	return rows
}

// outcomeRows is the set of "status/code" pairs of the document's push
// outcomes table: | `conflict` | `version_conflict` | ... (code empty for
// applied).
func outcomeRows(doc string) map[string]bool {
	rows := map[string]bool{}
	re := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (?:`([a-z_]+)`)? ?\\|")
	for _, m := range re.FindAllStringSubmatch(doc, -1) {
		rows[m[1]+"/"+m[2]] = true
	}
	return rows
}

// httpAnswer is one error answer of internal/httpapi: its code and HTTP status.
type httpAnswer struct{ code, status string }

// httpapiErrors reads internal/httpapi's sources: the code and HTTP status of
// every apiError composite literal with a constant code (a code may be built
// with several statuses), and the keys of the retryable map.
func httpapiErrors(t *testing.T) ([]httpAnswer, map[string]bool) {
	t.Helper()
	fset := gotoken.NewFileSet()
	files, err := filepath.Glob("../internal/httpapi/*.go")
	if err != nil {
		t.Fatal(err)
	}
	codes := map[httpAnswer]bool{} // code and status expression (http.StatusX)
	retryable := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "apiError" {
					var code, status string
					for _, e := range n.Elts {
						kv, ok := e.(*ast.KeyValueExpr)
						if !ok {
							continue
						}
						switch kv.Key.(*ast.Ident).Name {
						case "Code":
							if lit, ok := kv.Value.(*ast.BasicLit); ok {
								code, _ = strconv.Unquote(lit.Value)
							}
						case "Status":
							status = exprString(kv.Value)
						}
					}
					if code != "" {
						codes[httpAnswer{code, status}] = true
					}
				}
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if id.Name != "retryable" || i >= len(n.Values) {
						continue
					}
					lit, ok := n.Values[i].(*ast.CompositeLit)
					if !ok {
						continue
					}
					for _, e := range lit.Elts {
						kv := e.(*ast.KeyValueExpr)
						k, _ := strconv.Unquote(kv.Key.(*ast.BasicLit).Value)
						retryable[k] = exprString(kv.Value) == "true"
					}
				}
			}
			return true
		})
	}
	if len(retryable) == 0 {
		t.Fatal("no retryable map found in internal/httpapi")
	}
	return resolveStatuses(t, codes), retryable
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.Ident:
		return e.Name
	case *ast.BasicLit:
		return e.Value
	}
	return fmt.Sprintf("%T", e)
}

// resolveStatuses evaluates the status expressions (http.StatusX constants or
// literals) by type-checking them against net/http.
func resolveStatuses(t *testing.T, codes map[httpAnswer]bool) []httpAnswer {
	t.Helper()
	names := make([]httpAnswer, 0, len(codes))
	for a := range codes {
		names = append(names, a)
	}
	sort.Slice(names, func(i, j int) bool {
		return names[i].code+" "+names[i].status < names[j].code+" "+names[j].status
	})
	src := "package p\nimport \"net/http\"\nvar _ = http.StatusOK\nconst (\n"
	for i, a := range names {
		src += fmt.Sprintf("\tc%d = %s\n", i, a.status)
	}
	src += ")\n"
	fset := gotoken.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatalf("status expressions: %v", err)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatalf("status expressions: %v", err)
	}
	out := make([]httpAnswer, len(names))
	for i, a := range names {
		c := pkg.Scope().Lookup(fmt.Sprintf("c%d", i)).(*types.Const)
		v, ok := constant.Int64Val(c.Val())
		if !ok {
			t.Fatalf("status of %s is not an integer constant", a.code)
		}
		out[i] = httpAnswer{a.code, strconv.FormatInt(v, 10)}
	}
	return out
}

type refusal struct{ status, code, file string }

type sqlOutcome struct{ status, code, file string }

// sqlCodes reads sql/functions/*/*.sql: every synchro.refuse(status, 'code', ...) and
// every push outcome built as 'status', '...'[, 'code', '...'].
func sqlCodes(t *testing.T) ([]refusal, []sqlOutcome) {
	t.Helper()
	files, err := filepath.Glob("../sql/functions/*/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	refuseRE := regexp.MustCompile(`synchro\.refuse\(\s*(\d{3})\s*,\s*'([a-z_]+)'`)
	outcomeRE := regexp.MustCompile(`'status'\s*,\s*'([a-z_]+)'(?:\s*,\s*'code'\s*,\s*'([a-z_]+)')?`)
	var refusals []refusal
	var outcomes []sqlOutcome
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		base, _ := filepath.Rel("../sql/functions", name)
		for _, m := range refuseRE.FindAllStringSubmatch(string(b), -1) {
			refusals = append(refusals, refusal{m[1], m[2], base})
		}
		for _, m := range outcomeRE.FindAllStringSubmatch(string(b), -1) {
			outcomes = append(outcomes, sqlOutcome{m[1], m[2], base})
		}
	}
	return refusals, outcomes
}
