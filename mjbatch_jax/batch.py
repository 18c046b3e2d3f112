"""placeholder"""
class Batch: pass
