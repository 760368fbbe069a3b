import SyncEngine
