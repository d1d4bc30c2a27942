package app_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The layering rules of design.md and style.md, checked on every file so
// they hold by construction rather than by memory (what a depguard rule by
// file glob would do, without another tool to install).
func TestArchitecture(t *testing.T) {
	t.Parallel()
	const mod = "github.com/oncepay/gateway/"
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		name    string
		applies func(rel string) bool
		forbid  []string // import paths: "x/" a prefix, "x$" exactly x, else x and below
	}
	inDir := func(dirs ...string) func(string) bool {
		return func(rel string) bool {
			for _, d := range dirs {
				if strings.HasPrefix(rel, d+"/") {
					return true
				}
			}
			return false
		}
	}
	rules := []rule{
		{"stores never see Fiber", func(rel string) bool { return strings.HasSuffix(filepath.Base(rel), "store.go") }, []string{"github.com/gofiber/"}},
		{"handlers never build SQL", func(rel string) bool { return strings.HasSuffix(filepath.Base(rel), "http.go") }, []string{"gorm.io/"}},
		{"providers know nothing about the database or the gateway",
			func(rel string) bool { return inDir("providers")(rel) && !inDir("providers/simulator")(rel) },
			[]string{"gorm.io/", mod + "app", mod + "payments", mod + "tenants", mod + "idempotency", mod + "scheduler"}},
		{"idempotency knows nothing about payments", inDir("idempotency"),
			[]string{mod + "payments", mod + "tenants", mod + "scheduler", mod + "providers"}},
		{"payments and tenants are siblings", inDir("payments"), []string{mod + "tenants"}},
		{"tenants and payments are siblings", inDir("tenants"), []string{mod + "payments", mod + "idempotency"}},
		{"the helpers domain packages share know no domain", inDir("app/reqjson", "app/reqtime", "app/query", "app/ids", "app/database/dbclock", "app/database/rawsql", "app/database/pipeline", "app/problem", "app/audit", "app/ratelimit", "app/failpoint", "app/secretbox", "app/gctune", "app/logthrottle", "app/logctx"),
			[]string{mod + "payments", mod + "tenants", mod + "idempotency", mod + "scheduler", mod + "providers", mod + "app$"}},
		{"events know no payments or tenants", inDir("events"),
			[]string{mod + "payments", mod + "tenants", mod + "scheduler", mod + "providers"}},
		{"domain packages do not import the app", inDir("payments", "tenants", "idempotency", "scheduler", "providers", "config", "events"),
			[]string{mod + "app$", mod + "app/apptest", mod + "app/database$"}},
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "docs", "bench", "data", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		testHelper := strings.HasSuffix(filepath.Dir(rel), "test") // dbtest, apptest, paystacktest…
		for _, r := range rules {
			if !r.applies(rel) || testHelper {
				continue
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, bad := range r.forbid {
					if importMatches(p, bad) {
						t.Errorf("%s imports %s: %s", rel, p, r.name)
					}
				}
			}
		}
		// config/ is the only reader of the environment (test helpers and
		// the test-only failpoint build aside).
		if !strings.HasPrefix(rel, "config/") && !testHelper && !strings.HasSuffix(rel, "failpoint_on.go") {
			full, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
			if err != nil {
				return err
			}
			ast.Inspect(full, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if ok && sel.Sel != nil {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "os" &&
						(sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv" || sel.Sel.Name == "Environ") {
						t.Errorf("%s reads the environment (os.%s): only config/ may", rel, sel.Sel.Name)
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func importMatches(path, rule string) bool {
	if exact, ok := strings.CutSuffix(rule, "$"); ok {
		return path == exact
	}
	if strings.HasSuffix(rule, "/") {
		return strings.HasPrefix(path, rule)
	}
	return path == rule || strings.HasPrefix(path, rule+"/")
}
