package coordtest

// Tests from a review of periodic jobs, elections and maintenance
// (2026-12-03). Run adds them to the suite.
var maintReviewTests = []suiteTest{}
