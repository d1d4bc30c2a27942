package app

// IsJSON is isJSON, for the fuzz target.
var IsJSON = isJSON
