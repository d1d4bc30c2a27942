// Package rawsql builds GORM raw statements for the hot path.
//
// db.Raw renders its SQL one byte at a time through an interface (GORM's
// clause.Expr.Build: a WriteByte call per byte, for every '?' a check of
// whether the previous byte was '('), which on the few-hundred-byte CTEs of
// a payment's claim and completion was 6–8% of the gateway's CPU per new
// payment. Raw produces the same statement — the same text, the same
// values in the same order — by copying the text between placeholders
// whole, and hands it to GORM as the statement of a db.Raw, so callbacks,
// loggers and tests that capture statements see exactly what they saw.
package rawsql

import (
	"database/sql"
	"database/sql/driver"
	"reflect"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Raw is db.Raw(query, vars...). It renders the statement itself when query
// and vars are of the plain kinds the hot path uses: on PostgreSQL, '?'
// placeholders, vars that are values (bound as $n) or clause.Expr (rendered
// in place, recursively), one var per placeholder. Anything else — named
// ('@') parameters, slices that GORM expands into lists (a []byte too,
// where GORM's builder does: right after '(' or in an Expr
// WithoutParentheses), columns, other clause expressions, sub-queries, a
// leading pgx.QueryExecMode, another dialect — goes to db.Raw unchanged.
//
// One difference is deliberate: db.Raw on a statement that already holds
// vars (an instance reused without a new Session) keeps them and numbers
// its placeholders after them; Raw starts the statement's vars afresh.
// The stores call it on a new instance (db.WithContext), where the two
// agree.
func Raw(db *gorm.DB, query string, vars ...any) *gorm.DB {
	if db.Dialector.Name() != "postgres" {
		return db.Raw(query, vars...)
	}
	size, binds, ok := renders(query, vars)
	if !ok {
		return db.Raw(query, vars...)
	}
	tx := db.Raw("")
	r := renderer{sql: &tx.Statement.SQL, vars: make([]any, 0, binds)}
	r.sql.Grow(size + binds*4) // "$n", n up to 999
	r.expr(query, vars)
	tx.Statement.Vars = r.vars
	return tx
}

// renders reports whether Raw renders query and vars itself on
// PostgreSQL, and measures them.
func renders(query string, vars []any) (size, binds int, ok bool) {
	if strings.IndexByte(query, '@') >= 0 {
		return 0, 0, false // named parameters
	}
	if len(vars) > 0 {
		if _, ok := vars[0].(pgx.QueryExecMode); ok {
			return 0, 0, false // the dialect numbers the others from $0
		}
	}
	return measure(query, vars, false)
}

// measure checks that query and vars are of the kinds Raw renders itself,
// and returns the length of their text and how many values they bind.
// bare is an Expr's WithoutParentheses.
func measure(query string, vars []any, bare bool) (size, binds int, ok bool) {
	if strings.Count(query, "?") != len(vars) {
		// GORM writes surplus placeholders literally and appends surplus
		// vars as named args.
		return 0, 0, false
	}
	size = len(query) - len(vars)
	rest := query
	afterParenthesis := false
	for _, v := range vars {
		i := strings.IndexByte(rest, '?')
		// GORM's builder remembers whether the last byte it wrote was '('
		// (placeholders write none), and there, or in a bare Expr, it
		// expands any slice, a []byte included, into a list.
		if i > 0 {
			afterParenthesis = rest[i-1] == '('
		}
		rest = rest[i+1:]
		switch v := v.(type) {
		case gorm.Valuer, clause.Column, clause.Table, clause.Interface, sql.NamedArg, []any, *gorm.DB:
			return 0, 0, false
		case clause.Expr:
			n, b, ok := measure(v.SQL, v.Vars, v.WithoutParentheses)
			if !ok {
				return 0, 0, false
			}
			size, binds = size+n, binds+b
			continue
		case clause.Expression:
			return 0, 0, false
		case driver.Valuer, nil:
		case []byte:
			if afterParenthesis || bare {
				return 0, 0, false
			}
		default:
			if k := reflect.TypeOf(v).Kind(); k == reflect.Slice || k == reflect.Array {
				return 0, 0, false // expanded into a list by GORM (or "(NULL)" when empty)
			}
		}
		binds++
	}
	return size, binds, true
}

// renderer writes a statement measure accepted, as GORM's Statement.AddVar
// would: values bound as $n in order, clause.Expr rendered in place.
type renderer struct {
	sql  *strings.Builder
	vars []any
}

func (r *renderer) expr(query string, vars []any) {
	for _, v := range vars {
		i := strings.IndexByte(query, '?')
		r.sql.WriteString(query[:i])
		query = query[i+1:]
		if e, ok := v.(clause.Expr); ok {
			r.expr(e.SQL, e.Vars)
			continue
		}
		r.vars = append(r.vars, v)
		r.sql.WriteByte('$')
		r.sql.WriteString(strconv.Itoa(len(r.vars)))
	}
	r.sql.WriteString(query)
}
