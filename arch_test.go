package main

// The house's walls, checked on every test run: the layout's rules
// (ARCHITECTURE.md), each failing with the file and line that broke it.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coupond/coupond/engine"
)

const modulePath = "github.com/coupond/coupond"

// goFile is one parsed, non-generated Go file of the module.
type goFile struct {
	dir  string // the package's directory, slash-separated, "." for the root
	path string
	fset *token.FileSet
	ast  *ast.File
}

// moduleFiles parses every non-test Go file of the module that is not
// generated code.
func moduleFiles(t *testing.T) []goFile { return walkGo(t, false) }

// walkGo parses the module's Go files that are not generated code, test
// files too when tests.
func walkGo(t *testing.T, tests bool) []goFile {
	t.Helper()
	var files []goFile
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !tests && strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		files = append(files, goFile{dir: filepath.ToSlash(filepath.Dir(path)), path: path, fset: fset, ast: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("found %d Go files; is the test running at the module's root?", len(files))
	}
	return files
}

// imports returns the import paths of f.
func imports(f goFile) []string {
	var out []string
	for _, s := range f.ast.Imports {
		p, err := strconv.Unquote(s.Path.Value)
		if err == nil {
			out = append(out, p)
		}
	}
	return out
}

// pkgDir is the module directory of import path p, "" outside the module.
func pkgDir(p string) string {
	switch {
	case p == modulePath:
		return "."
	case strings.HasPrefix(p, modulePath+"/"):
		return strings.TrimPrefix(p, modulePath+"/")
	}
	return ""
}

// TestPebbleOnlyInStore holds tests to the rule too: a test above store
// that needs an in-memory or faulty file system takes it from
// store/storefs.
func TestPebbleOnlyInStore(t *testing.T) {
	for _, f := range walkGo(t, true) {
		if f.dir == "store" || strings.HasPrefix(f.dir, "store/") {
			continue
		}
		for _, p := range imports(f) {
			if strings.HasPrefix(p, "github.com/cockroachdb/pebble") {
				t.Errorf("%s imports %s: only store may reach Pebble", f.path, p)
			}
		}
	}
}

func TestPolicyNeedsNeitherStoreNorEngine(t *testing.T) {
	deps := map[string][]string{} // module dir -> module dirs it imports
	for _, f := range moduleFiles(t) {
		for _, p := range imports(f) {
			if d := pkgDir(p); d != "" && !slices.Contains(deps[f.dir], d) {
				deps[f.dir] = append(deps[f.dir], d)
			}
		}
	}
	seen := map[string]string{"policy": ""} // dir -> the dir that imported it
	queue := []string{"policy"}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		for _, next := range deps[d] {
			if _, ok := seen[next]; !ok {
				seen[next] = d
				queue = append(queue, next)
			}
		}
	}
	for _, banned := range []string{"store", "engine"} {
		for d, by := range seen {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("policy depends on %s (imported by %s): the model must stay store-free", d, by)
			}
		}
	}
}

// maxFuncLines is the longest function allowed outside tests and
// generated code, from its func line to its closing brace.
const maxFuncLines = 80

func TestFunctionsFitOnAScreen(t *testing.T) {
	for _, f := range moduleFiles(t) {
		for _, d := range f.ast.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := f.fset.Position(fn.Pos()).Line, f.fset.Position(fn.End()).Line
			if n := end - start + 1; n > maxFuncLines {
				t.Errorf("%s:%d: %s is %d lines (at most %d)", f.path, start, fn.Name.Name, n, maxFuncLines)
			}
		}
	}
}

// maxEngineMethods bounds *engine.Engine's methods: those it declares,
// exported or not, and its method set as a caller sees it (promoted
// methods included). Engine is the decider; its other duties are types of
// their own reached through its fields.
const maxEngineMethods = 30

func TestEngineStaysSmall(t *testing.T) {
	var methods []string
	for _, f := range moduleFiles(t) {
		if f.dir != "engine" {
			continue
		}
		for _, d := range f.ast.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			typ := fn.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if id, ok := typ.(*ast.Ident); ok && id.Name == "Engine" {
				methods = append(methods, fn.Name.Name)
			}
		}
	}
	if len(methods) == 0 {
		t.Fatal("found no method of engine.Engine: has the type moved?")
	}
	if len(methods) >= maxEngineMethods {
		slices.Sort(methods)
		t.Errorf("*engine.Engine declares %d methods (under %d): %s", len(methods), maxEngineMethods, strings.Join(methods, ", "))
	}
	typ := reflect.TypeFor[*engine.Engine]()
	if n := typ.NumMethod(); n >= maxEngineMethods {
		var names []string
		for i := range n {
			names = append(names, typ.Method(i).Name)
		}
		t.Errorf("*engine.Engine's method set has %d exported methods (under %d): %s", n, maxEngineMethods, strings.Join(names, ", "))
	}
}

// TestImportsFollowTheMap holds every package of the module to the "may
// import" column of its row in ARCHITECTURE.md's package table: a package
// without a row, or an import of the module the row does not name, fails,
// so the map and the code change together. "everything below" (cli) allows
// any package of the module.
func TestImportsFollowTheMap(t *testing.T) {
	allowed := mapImports(t)
	for _, f := range moduleFiles(t) {
		pkg := f.dir
		if pkg == "." {
			pkg = "main"
		}
		may, ok := allowed[pkg]
		if !ok {
			t.Errorf("%s: package %s has no row in ARCHITECTURE.md's package table", f.path, pkg)
			continue
		}
		for _, p := range imports(f) {
			d := pkgDir(p)
			if d == "" || d == f.dir || may["everything below"] {
				continue
			}
			if d == "." {
				d = "main"
			}
			if !may[d] {
				t.Errorf("%s imports %s, which ARCHITECTURE.md's row of %s does not allow", f.path, d, pkg)
			}
		}
	}
}

// mapImports reads ARCHITECTURE.md's package table: for each package (the
// row's first cell, in backquotes), the module packages named in its last
// cell ("may import"), plus "everything below" when the cell says so.
func mapImports(t *testing.T) map[string]map[string]bool {
	t.Helper()
	b, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]bool{"main": true}
	for _, f := range walkGo(t, true) {
		dirs[f.dir] = true
	}
	word := regexp.MustCompile(`[a-z][a-z0-9_]*(/[a-z][a-z0-9_]*)*`)
	rows := map[string]map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) < 3 || !strings.HasPrefix(cells[0], "| `") {
			continue
		}
		pkg := strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")
		may := map[string]bool{}
		last := strings.TrimSuffix(cells[len(cells)-1], " |")
		if strings.Contains(last, "everything below") {
			may["everything below"] = true
		}
		for _, w := range word.FindAllString(last, -1) {
			if dirs[w] {
				may[w] = true
			}
		}
		rows[pkg] = may
	}
	if len(rows) < 10 {
		t.Fatalf("found %d rows in ARCHITECTURE.md's package table: has its form changed?", len(rows))
	}
	return rows
}
