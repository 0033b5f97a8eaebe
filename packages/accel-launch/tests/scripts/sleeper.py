"""Each rank writes its pid to $OUT/ready<RANK> and sleeps until it is stopped."""

import os
import time

path = os.path.join(os.environ["OUT"], f"ready{os.environ['RANK']}")
with open(path + ".tmp", "w") as file:
    file.write(str(os.getpid()))
os.replace(path + ".tmp", path)
time.sleep(120)
