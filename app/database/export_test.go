package database

import "gorm.io/gorm"

// MigrateBefore applies the migrations older than version: the schema
// the release before version left.
func MigrateBefore(db *gorm.DB, version int) (int, error) {
	var ms []migration
	for _, m := range migrations {
		if m.Version < version {
			ms = append(ms, m)
		}
	}
	return apply(db, ms)
}
