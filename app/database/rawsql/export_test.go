package rawsql

// Renders reports whether Raw renders query and vars itself on PostgreSQL
// rather than handing them to db.Raw.
func Renders(query string, vars ...any) bool {
	_, _, ok := renders(query, vars)
	return ok
}
