// The wait helpers live in Tests/TestSupport (shared by both test targets).
@_exported import TestSupport
