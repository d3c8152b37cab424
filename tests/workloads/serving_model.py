"""An MLflow pyfunc model defined as code (mlflow's "models from code"), so a replica's
`mlflow models serve` loads it without the test module: it multiplies column/key `x` by the
model config's `k`, which tells the versions apart in a traffic split."""

import mlflow
from mlflow.pyfunc import PythonModel


class Scale(PythonModel):
    def load_context(self, context):
        self.k = float(context.model_config["k"])

    def predict(self, context, model_input, params=None):
        import numpy as np
        import pandas as pd

        if isinstance(model_input, pd.DataFrame):
            values = model_input["x"].tolist()
        elif isinstance(model_input, dict):
            values = list(np.asarray(model_input["x"]).ravel())
        else:
            values = list(np.asarray(model_input).ravel())
        return [float(v) * self.k for v in values]


mlflow.models.set_model(Scale())
