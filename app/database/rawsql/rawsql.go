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

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Raw is db.Raw(query, vars...). It renders the statement itself when query
// and vars are of the plain kinds the hot path uses: on PostgreSQL, '?'
// placeholders, vars that are values (bound as $n) or clause.Expr (rendered
// in place, recursively), one var per placeholder. Anything else — named
// ('@') parameters, slices that GORM expands into lists, columns, other
// clause expressions, sub-queries, another dialect — goes to db.Raw
// unchanged.
func Raw(db *gorm.DB, query string, vars ...any) *gorm.DB {
	if db.Dialector.Name() != "postgres" || strings.IndexByte(query, '@') >= 0 {
		return db.Raw(query, vars...)
	}
	size, binds, ok := measure(query, vars)
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

// measure checks that query and vars are of the kinds Raw renders itself,
// and returns the length of their text and how many values they bind.
func measure(query string, vars []any) (size, binds int, ok bool) {
	if strings.Count(query, "?") != len(vars) {
		// GORM writes surplus placeholders literally and appends surplus
		// vars as named args.
		return 0, 0, false
	}
	size = len(query) - len(vars)
	for _, v := range vars {
		switch v := v.(type) {
		case gorm.Valuer, clause.Column, clause.Table, clause.Interface, sql.NamedArg, []any:
			return 0, 0, false
		case clause.Expr:
			n, b, ok := measure(v.SQL, v.Vars)
			if !ok {
				return 0, 0, false
			}
			size, binds = size+n, binds+b
			continue
		case clause.Expression:
			return 0, 0, false
		case driver.Valuer, []byte, nil:
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
