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

// CheckMigratedWithout is CheckMigrated by a build that does not know
// version (another branch's, from this build's point of view).
func CheckMigratedWithout(db *gorm.DB, version int) ([]int, error) {
	var ms []migration
	for _, m := range migrations {
		if m.Version != version {
			ms = append(ms, m)
		}
	}
	return checkMigrated(db, ms)
}

// Name is this build's name of version.
func Name(version int) string {
	for _, m := range migrations {
		if m.Version == version {
			return m.Name
		}
	}
	return ""
}
